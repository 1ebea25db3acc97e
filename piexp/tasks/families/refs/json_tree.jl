# Reference for json_tree: a small JSON reader (Julia's standard library has none), then
# a depth-first walk summing size * depth over nodes with the tag.

mutable struct Reader
    s::String
    i::Int
end

function skipws(r::Reader)
    while r.i <= ncodeunits(r.s) && r.s[r.i] in (' ', '\n', '\r', '\t')
        r.i += 1
    end
end

function readvalue(r::Reader)
    skipws(r)
    c = r.s[r.i]
    if c == '{'
        r.i += 1
        obj = Dict{String,Any}()
        skipws(r)
        if r.s[r.i] == '}'
            r.i += 1
            return obj
        end
        while true
            skipws(r)
            key = readvalue(r)
            skipws(r)
            r.i += 1  # ':'
            obj[key] = readvalue(r)
            skipws(r)
            sep = r.s[r.i]
            r.i += 1
            sep == '}' && return obj
        end
    elseif c == '['
        r.i += 1
        arr = Any[]
        skipws(r)
        if r.s[r.i] == ']'
            r.i += 1
            return arr
        end
        while true
            push!(arr, readvalue(r))
            skipws(r)
            sep = r.s[r.i]
            r.i += 1
            sep == ']' && return arr
        end
    elseif c == '"'
        buf = IOBuffer()
        r.i += 1
        while r.s[r.i] != '"'
            if r.s[r.i] == '\\'
                r.i += 1
            end
            write(buf, r.s[r.i])
            r.i += 1
        end
        r.i += 1
        return String(take!(buf))
    else
        j = r.i
        while r.i <= ncodeunits(r.s) && (isdigit(r.s[r.i]) || r.s[r.i] == '-')
            r.i += 1
        end
        return parse(Int64, r.s[j:r.i-1])
    end
end

query = Dict{String,String}()
for line in eachline("query.txt")
    if occursin('=', line)
        key, value = split(strip(line), '='; limit=2)
        query[String(key)] = String(value)
    end
end
tag = query["tag"]
root = readvalue(Reader(read("tree.json", String), 1))
total = Int64(0)
stack = Any[(root, 0)]
while !isempty(stack)
    node, depth = pop!(stack)
    if tag in get(node, "tags", Any[])
        global total += node["size"] * depth
    end
    for child in get(node, "children", Any[])
        push!(stack, (child, depth + 1))
    end
end
println(total)
