# Reference for number_theory: sieve once, prefix sums of qualifying primes, sum per range.
query = Dict{String,String}()
for line in eachline("query.txt")
    if occursin('=', line)
        key, value = split(strip(line), '='; limit=2)
        query[String(key)] = String(value)
    end
end
k = parse(Int64, query["k"])
ranges = [Tuple(parse.(Int64, split(strip(line)))) for line in eachline("ranges.txt") if !isempty(strip(line))]
limit = maximum(b for (_, b) in ranges)
isprime = trues(limit)
isprime[1] = false
for i in 2:isqrt(limit)
    if isprime[i]
        for j in i*i:i:limit
            isprime[j] = false
        end
    end
end
# prefix[n + 1] = sum of qualifying primes <= n (Julia arrays start at 1)
prefix = zeros(Int64, limit + 1)
running = Int64(0)
for n in 1:limit
    if isprime[n] && sum(digits(n)) % k == 0
        global running += n
    end
    prefix[n + 1] = running
end
println(sum(prefix[b + 1] - prefix[a] for (a, b) in ranges))
