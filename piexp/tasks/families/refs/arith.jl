# Reference for arith: recursive-descent evaluation, floor-mod (Julia's `mod`), weighted
# by line number. Int64 is exact here: every value stays within +/-1e12.

function read_query(path)
    query = Dict{String,String}()
    for line in eachline(path)
        if occursin('=', line)
            key, value = split(strip(line), '='; limit=2)
            query[String(key)] = String(value)
        end
    end
    return query
end

function evaluate(text)
    tokens = [m.match for m in eachmatch(r"\d+|[-+*()]", text)]
    pos = Ref(1)
    peek() = pos[] <= length(tokens) ? tokens[pos[]] : ""
    function take()
        token = tokens[pos[]]
        pos[] += 1
        return token
    end
    local expr
    function atom()
        if peek() == "("
            take()
            value = expr()
            take()  # ")"
            return value
        end
        return parse(Int64, take())
    end
    function term()
        value = atom()
        while peek() == "*"
            take()
            value *= atom()
        end
        return value
    end
    function expr()
        value = term()
        while peek() == "+" || peek() == "-"
            op = take()
            right = term()
            value = op == "+" ? value + right : value - right
        end
        return value
    end
    return expr()
end

modulus = parse(Int64, read_query("query.txt")["modulus"])
lines = filter(!isempty, strip.(readlines("expressions.txt")))
total = Int64(0)
for (i, line) in enumerate(lines)
    global total += i * mod(evaluate(line), modulus)
end
println(total)
