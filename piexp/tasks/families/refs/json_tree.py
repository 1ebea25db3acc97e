# Reference for json_tree: depth-first walk summing size * depth over nodes with the tag.
import json

query = dict(line.strip().split("=", 1) for line in open("query.txt", encoding="utf-8") if "=" in line)
tag = query["tag"]
root = json.load(open("tree.json", encoding="utf-8"))
total = 0
stack = [(root, 0)]
while stack:
    node, depth = stack.pop()
    if tag in node.get("tags", []):
        total += node["size"] * depth
    for child in node.get("children", []):
        stack.append((child, depth + 1))
print(total)
