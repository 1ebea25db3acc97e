# Reference for graph_paths: Dijkstra from each query's source; unreachable counts -1.
import heapq

adj = {}
for line in open("edges.txt", encoding="utf-8"):
    parts = line.split()
    if len(parts) == 3:
        u, v, w = parts[0], parts[1], int(parts[2])
        adj.setdefault(u, []).append((v, w))
        adj.setdefault(v, []).append((u, w))


def shortest(source, target):
    dist = {source: 0}
    heap = [(0, source)]
    while heap:
        d, u = heapq.heappop(heap)
        if u == target:
            return d
        if d > dist[u]:
            continue
        for v, w in adj.get(u, []):
            if v not in dist or d + w < dist[v]:
                dist[v] = d + w
                heapq.heappush(heap, (d + w, v))
    return -1


total = 0
for line in open("queries.txt", encoding="utf-8"):
    parts = line.split()
    if len(parts) == 2:
        total += shortest(parts[0], parts[1])
print(total)
