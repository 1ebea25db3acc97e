"""graph_paths: shortest weighted paths in an undirected graph given as an edge list.

Needs a program: ~80 weighted edges, several queries, parallel edges and unreachable pairs
(counted as -1) -- Dijkstra or Floyd-Warshall, not inspection.
"""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass

from piexp.tasks.family import Family, check_exact


@dataclass(frozen=True)
class GraphPathsParams:
    n_nodes: int = 40  # nodes (named n<k>) that may appear in edges.txt and queries.txt
    n_edges: int = 70  # lines in edges.txt; parallel edges are allowed
    max_weight: int = 99  # edge weights are drawn from 1..max_weight
    n_queries: int = 8  # lines in queries.txt


def _dijkstra(adj: dict[str, list[tuple[str, int]]], source: str) -> dict[str, int]:
    dist = {source: 0}
    heap = [(0, source)]
    while heap:
        d, u = heapq.heappop(heap)
        if d > dist[u]:
            continue
        for v, w in adj.get(u, []):
            if d + w < dist.get(v, d + w + 1):
                dist[v] = d + w
                heapq.heappush(heap, (d + w, v))
    return dist


def generate(rng: random.Random, p: GraphPathsParams):
    names = [f"n{k}" for k in rng.sample(range(1, 10 * p.n_nodes), p.n_nodes)]
    edges = []
    adj: dict[str, list[tuple[str, int]]] = {}
    for _ in range(p.n_edges):
        u, v = rng.sample(names, 2) if p.n_nodes > 1 else (names[0], names[0])
        w = rng.randint(1, p.max_weight)
        edges.append(f"{u} {v} {w}")
        adj.setdefault(u, []).append((v, w))
        adj.setdefault(v, []).append((u, w))
    queries = []
    answer = 0
    for _ in range(p.n_queries):
        a, b = rng.choice(names), rng.choice(names)
        queries.append(f"{a} {b}")
        answer += _dijkstra(adj, a).get(b, -1)
    check_exact("graph_paths", answer)
    instruction = (
        "`edges.txt` lists an undirected weighted graph, one edge per line as `u v w` (two "
        "node names and a positive integer weight); the same pair may appear more than once. "
        "`queries.txt` has one query per line as `a b`.\n"
        "For each query take the length of the shortest path from a to b (0 when a equals b); "
        "if b cannot be reached from a, or a node appears in no edge, count -1 for that "
        "query. The answer is the sum over all queries. Print it as a decimal integer."
    )
    files = {"edges.txt": "\n".join(edges) + "\n", "queries.txt": "\n".join(queries) + "\n"}
    return instruction, files, answer, {}


FAMILY = Family(
    name="graph_paths",
    summary="undirected weighted edge list: sum of shortest-path lengths over queries",
    params_type=GraphPathsParams,
    limits={
        "n_nodes": (2, 300),
        "n_edges": (1, 600),
        "max_weight": (1, 100_000),
        "n_queries": (1, 60),
    },
    generate=generate,
)
