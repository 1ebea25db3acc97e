// Reference for json_tree: depth-first walk summing size * depth over nodes with the tag.
const fs = require("fs");

const query = {};
for (const line of fs.readFileSync("query.txt", "utf8").split("\n")) {
  const at = line.indexOf("=");
  if (at >= 0) query[line.slice(0, at).trim()] = line.slice(at + 1).trim();
}
const root = JSON.parse(fs.readFileSync("tree.json", "utf8"));
let total = 0;
const stack = [[root, 0]];
while (stack.length) {
  const [node, depth] = stack.pop();
  if ((node.tags || []).includes(query.tag)) total += node.size * depth;
  for (const child of node.children || []) stack.push([child, depth + 1]);
}
console.log(String(total));
