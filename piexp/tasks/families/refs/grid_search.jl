# Reference for grid_search: one BFS from S, then sum distances of reachable targets.
grid = [collect(rstrip(line)) for line in eachline("grid.txt") if !isempty(strip(line))]
rows = length(grid)
cols = length(grid[1])
dist = fill(-1, rows, cols)
queue = Tuple{Int,Int}[]
for r in 1:rows, c in 1:cols
    if grid[r][c] == 'S'
        dist[r, c] = 0
        push!(queue, (r, c))
    end
end
head = 1
while head <= length(queue)
    r, c = queue[head]
    global head += 1
    for (nr, nc) in ((r + 1, c), (r - 1, c), (r, c + 1), (r, c - 1))
        if 1 <= nr <= rows && 1 <= nc <= cols && grid[nr][nc] != '#' && dist[nr, nc] < 0
            dist[nr, nc] = dist[r, c] + 1
            push!(queue, (nr, nc))
        end
    end
end
total = 0
for r in 1:rows, c in 1:cols
    if grid[r][c] == '*' && dist[r, c] >= 0
        global total += dist[r, c]
    end
end
println(total)
