# Reference for log_stats: busiest service at the queried level, then its total latency.
query = Dict{String,String}()
for line in eachline("query.txt")
    if occursin('=', line)
        key, value = split(strip(line), '='; limit=2)
        query[String(key)] = String(value)
    end
end
level = query["level"]
records = Tuple{String,String,Int64}[]
for line in eachline("server.log")
    parts = split(strip(line))
    length(parts) < 3 && continue
    fields = Dict{String,String}()
    for part in parts[4:end]
        if occursin('=', part)
            key, value = split(part, '='; limit=2)
            fields[String(key)] = String(value)
        end
    end
    push!(records, (String(parts[2]), String(parts[3]), parse(Int64, fields["latency_ms"])))
end
counts = Dict{String,Int}()
for (lvl, service, _) in records
    if lvl == level
        counts[service] = get(counts, service, 0) + 1
    end
end
best = sort(collect(keys(counts)); by = s -> (-counts[s], s))[1]
println(sum(latency for (_, service, latency) in records if service == best))
