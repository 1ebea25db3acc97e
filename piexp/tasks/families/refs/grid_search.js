// Reference for grid_search: one BFS from S, then sum distances of reachable targets.
const fs = require("fs");

const grid = fs.readFileSync("grid.txt", "utf8").split("\n").map((l) => l.replace(/\r$/, "")).filter((l) => l.trim());
const rows = grid.length;
const cols = grid[0].length;
const dist = new Array(rows * cols).fill(-1);
const queue = [];
for (let r = 0; r < rows; r++) for (let c = 0; c < cols; c++) if (grid[r][c] === "S") { dist[r * cols + c] = 0; queue.push([r, c]); }
for (let head = 0; head < queue.length; head++) {
  const [r, c] = queue[head];
  for (const [nr, nc] of [[r + 1, c], [r - 1, c], [r, c + 1], [r, c - 1]]) {
    if (nr >= 0 && nr < rows && nc >= 0 && nc < cols && grid[nr][nc] !== "#" && dist[nr * cols + nc] < 0) {
      dist[nr * cols + nc] = dist[r * cols + c] + 1;
      queue.push([nr, nc]);
    }
  }
}
let total = 0;
for (let r = 0; r < rows; r++) for (let c = 0; c < cols; c++) if (grid[r][c] === "*" && dist[r * cols + c] >= 0) total += dist[r * cols + c];
console.log(String(total));
