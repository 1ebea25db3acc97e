// Reference for csv_agg: filter by region and returned flag, group revenue by product.
const fs = require("fs");

const query = {};
for (const line of fs.readFileSync("query.txt", "utf8").split("\n")) {
  const at = line.indexOf("=");
  if (at >= 0) query[line.slice(0, at).trim()] = line.slice(at + 1).trim();
}
const regions = new Set(query.regions.split(","));
const lines = fs.readFileSync("sales.csv", "utf8").split("\n").filter((l) => l.trim());
const header = lines[0].trim().split(",");
const col = Object.fromEntries(header.map((name, i) => [name, i]));
const totals = new Map();
for (const line of lines.slice(1)) {
  const f = line.trim().split(",");
  if (regions.has(f[col.region]) && f[col.returned] === "no") {
    const revenue = Number(f[col.quantity]) * Number(f[col.unit_price_cents]);
    totals.set(f[col.product], (totals.get(f[col.product]) || 0) + revenue);
  }
}
const values = [...totals.values()];
console.log(String(Math.max(...values) - Math.min(...values)));
