# Reference for grid_search: one BFS from S, then sum distances of reachable targets.
from collections import deque

grid = [line.rstrip("\n") for line in open("grid.txt", encoding="utf-8") if line.strip()]
start = next((r, c) for r, row in enumerate(grid) for c, ch in enumerate(row) if ch == "S")
dist = {start: 0}
queue = deque([start])
while queue:
    r, c = queue.popleft()
    for nr, nc in ((r + 1, c), (r - 1, c), (r, c + 1), (r, c - 1)):
        if 0 <= nr < len(grid) and 0 <= nc < len(grid[nr]) and grid[nr][nc] != "#" and (nr, nc) not in dist:
            dist[(nr, nc)] = dist[(r, c)] + 1
            queue.append((nr, nc))
print(sum(d for (r, c), d in dist.items() if grid[r][c] == "*"))
