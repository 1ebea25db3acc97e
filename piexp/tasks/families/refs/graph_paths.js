// Reference for graph_paths: O(V^2) Dijkstra per query; unreachable counts -1.
const fs = require("fs");

const adj = new Map();
const add = (u, v, w) => {
  if (!adj.has(u)) adj.set(u, []);
  adj.get(u).push([v, w]);
};
for (const line of fs.readFileSync("edges.txt", "utf8").split("\n")) {
  const parts = line.trim().split(/\s+/);
  if (parts.length === 3) {
    add(parts[0], parts[1], Number(parts[2]));
    add(parts[1], parts[0], Number(parts[2]));
  }
}

function shortest(source, target) {
  const dist = new Map([[source, 0]]);
  const done = new Set();
  while (true) {
    let u = null;
    for (const [node, d] of dist) if (!done.has(node) && (u === null || d < dist.get(u))) u = node;
    if (u === null) return -1;
    if (u === target) return dist.get(u);
    done.add(u);
    for (const [v, w] of adj.get(u) || []) {
      const nd = dist.get(u) + w;
      if (!dist.has(v) || nd < dist.get(v)) dist.set(v, nd);
    }
  }
}

let total = 0;
for (const line of fs.readFileSync("queries.txt", "utf8").split("\n")) {
  const parts = line.trim().split(/\s+/);
  if (parts.length === 2) total += shortest(parts[0], parts[1]);
}
console.log(String(total));
