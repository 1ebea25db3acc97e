"""json_tree: traverse a nested JSON tree and aggregate over tagged nodes by depth.

Needs a program: ~60 nodes nested several levels deep in one JSON document; optional keys
(leaves have no "children", some nodes have no "tags") make a careless walk fail. The
answer is computed here from each node's depth recorded when it is attached, never by
walking the JSON as the references do.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass

from piexp.tasks.families._common import query_file
from piexp.tasks.difficulty import Difficulty
from piexp.tasks.family import Family, check_exact

TAGS = ("red", "green", "blue", "gold", "grey")
SYLLABLES = ("ka", "lo", "mi", "nu", "pe", "ra", "si", "to", "vu", "ze")


@dataclass(frozen=True)
class JsonTreeParams:
    n_nodes: int = 60  # nodes in the tree, root included
    max_children: int = 4  # most children any node has
    max_size: int = 1000  # each node's size is drawn from 1..max_size


def generate(rng: random.Random, p: JsonTreeParams):
    # Attach each new node to a random earlier node that still has room: random shapes,
    # from bushy to deep, with exactly n_nodes nodes.
    nodes = []
    parents: list[int] = []
    depths: list[int] = []
    for i in range(p.n_nodes):
        node: dict = {"name": "".join(rng.choices(SYLLABLES, k=3)) + str(i), "size": rng.randint(1, p.max_size)}
        if rng.random() < 0.8:
            node["tags"] = sorted(rng.sample(TAGS, rng.randint(0, 3)))
        nodes.append(node)
        if i == 0:
            parents.append(-1)
            depths.append(0)
            continue
        open_nodes = [j for j in range(i) if len(nodes[j].get("children", [])) < p.max_children]
        # Prefer recent nodes half the time, so trees get deep, not only wide.
        parent = rng.choice(open_nodes[-4:] if rng.random() < 0.5 else open_nodes)
        nodes[parent].setdefault("children", []).append(node)
        parents.append(parent)
        depths.append(depths[parent] + 1)
    tag = rng.choice(TAGS)
    answer = sum(node["size"] * depth for node, depth in zip(nodes, depths) if tag in node.get("tags", []))
    check_exact("json_tree", answer)
    instruction = (
        "`tree.json` holds one JSON object, the root of a tree. Every node has a `name` and an "
        "integer `size`; it may have `tags` (a list of strings) and `children` (a list of "
        "nodes). A missing `tags` or `children` means none.\n"
        "The root has depth 0 and a child has its parent's depth plus 1. The answer is the sum "
        f"of size * depth over every node whose tags include `{tag}`. The tag is also given "
        f"in `query.txt` as `tag={tag}`. Print the answer as a decimal integer."
    )
    files = {"tree.json": json.dumps(nodes[0]) + "\n", "query.txt": query_file(tag=tag)}
    return instruction, files, answer, {"tag": tag}


FAMILY = Family(
    name="json_tree",
    summary="nested JSON tree: sum of size*depth over nodes with a tag",
    params_type=JsonTreeParams,
    limits={"n_nodes": (1, 300), "max_children": (1, 20), "max_size": (1, 1_000_000)},
    # Larger is harder in each; level 3 is the defaults (`tasks family=json_tree --params`).
    difficulty=Difficulty(
        harder={"n_nodes": 1, "max_children": 1},
        levels=(
            {"n_nodes": 5, "max_children": 2},
            {"n_nodes": 20, "max_children": 3},
            {"n_nodes": 60, "max_children": 4},
            {"n_nodes": 150, "max_children": 6},
            {"n_nodes": 300, "max_children": 8},
        ),
    ),
    generate=generate,
)
