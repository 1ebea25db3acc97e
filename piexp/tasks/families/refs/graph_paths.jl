# Reference for graph_paths: O(V^2) Dijkstra per query; unreachable counts -1.
adj = Dict{String,Vector{Tuple{String,Int64}}}()
for line in eachline("edges.txt")
    parts = split(strip(line))
    if length(parts) == 3
        u, v, w = String(parts[1]), String(parts[2]), parse(Int64, parts[3])
        push!(get!(adj, u, Tuple{String,Int64}[]), (v, w))
        push!(get!(adj, v, Tuple{String,Int64}[]), (u, w))
    end
end

function shortest(adj, source, target)
    dist = Dict{String,Int64}(source => 0)
    done = Set{String}()
    while true
        u = ""
        found = false
        for (node, d) in dist
            if !(node in done) && (!found || d < dist[u])
                u = node
                found = true
            end
        end
        found || return -1
        u == target && return dist[u]
        push!(done, u)
        for (v, w) in get(adj, u, Tuple{String,Int64}[])
            nd = dist[u] + w
            if !haskey(dist, v) || nd < dist[v]
                dist[v] = nd
            end
        end
    end
end

total = Int64(0)
for line in eachline("queries.txt")
    parts = split(strip(line))
    if length(parts) == 2
        global total += shortest(adj, String(parts[1]), String(parts[2]))
    end
end
println(total)
