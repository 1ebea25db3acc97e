"""graph_paths: shortest weighted paths in an undirected graph given as an edge list.

Needs a program: ~80 weighted edges, several queries, parallel edges and unreachable pairs
(counted as -1) -- Dijkstra or Floyd-Warshall, not inspection. The answer is computed
here by Bellman-Ford on the generated edges, independently of the references' Dijkstra.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from piexp.tasks.difficulty import Difficulty
from piexp.tasks.family import Family, check_exact


@dataclass(frozen=True)
class GraphPathsParams:
    n_nodes: int = 40  # nodes (named n<k>) that may appear in edges.txt and queries.txt
    n_edges: int = 70  # lines in edges.txt; parallel edges are allowed
    max_weight: int = 99  # edge weights are drawn from 1..max_weight
    n_queries: int = 8  # lines in queries.txt


def _bellman_ford(edges: list[tuple[str, str, int]], source: str) -> dict[str, int]:
    """Shortest distances from ``source`` by relaxing every edge (both ways) until none improves.

    Bellman-Ford rather than the references' Dijkstra, so that a bug in either shows up as
    a mismatch; weights are positive, so it stops after at most one pass per path edge.
    """
    dist = {source: 0}
    improved = True
    while improved:
        improved = False
        for u, v, w in edges:
            for near, far in ((u, v), (v, u)):
                if near in dist and (far not in dist or dist[near] + w < dist[far]):
                    dist[far] = dist[near] + w
                    improved = True
    return dist


def generate(rng: random.Random, p: GraphPathsParams):
    names = [f"n{k}" for k in rng.sample(range(1, 10 * p.n_nodes), p.n_nodes)]
    edges = []
    weighted: list[tuple[str, str, int]] = []
    for _ in range(p.n_edges):
        u, v = rng.sample(names, 2) if p.n_nodes > 1 else (names[0], names[0])
        w = rng.randint(1, p.max_weight)
        edges.append(f"{u} {v} {w}")
        weighted.append((u, v, w))
    queries = []
    distances: dict[str, dict[str, int]] = {}  # per query source, computed once
    answer = 0
    for _ in range(p.n_queries):
        a, b = rng.choice(names), rng.choice(names)
        queries.append(f"{a} {b}")
        if a not in distances:
            distances[a] = _bellman_ford(weighted, a)
        answer += distances[a].get(b, -1)
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
    # Larger is harder in each; level 3 is the defaults (`tasks family=graph_paths --params`).
    difficulty=Difficulty(
        harder={"n_nodes": 1, "n_edges": 1, "n_queries": 1},
        levels=(
            {"n_nodes": 5, "n_edges": 6, "n_queries": 2},
            {"n_nodes": 15, "n_edges": 25, "n_queries": 4},
            {"n_nodes": 40, "n_edges": 70, "n_queries": 8},
            {"n_nodes": 100, "n_edges": 200, "n_queries": 16},
            {"n_nodes": 300, "n_edges": 600, "n_queries": 40},
        ),
    ),
    generate=generate,
)
