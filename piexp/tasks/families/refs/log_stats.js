// Reference for log_stats: busiest service at the queried level, then its total latency.
const fs = require("fs");

const query = {};
for (const line of fs.readFileSync("query.txt", "utf8").split("\n")) {
  const at = line.indexOf("=");
  if (at >= 0) query[line.slice(0, at).trim()] = line.slice(at + 1).trim();
}
const records = [];
for (const line of fs.readFileSync("server.log", "utf8").split("\n")) {
  const parts = line.trim().split(/\s+/);
  if (parts.length < 3) continue;
  const fields = {};
  for (const part of parts.slice(3)) {
    const at = part.indexOf("=");
    if (at >= 0) fields[part.slice(0, at)] = part.slice(at + 1);
  }
  records.push([parts[1], parts[2], Number(fields.latency_ms)]);
}
const counts = new Map();
for (const [lvl, service] of records) {
  if (lvl === query.level) counts.set(service, (counts.get(service) || 0) + 1);
}
let best = null;
for (const [service, count] of counts) {
  if (best === null || count > counts.get(best) || (count === counts.get(best) && service < best)) best = service;
}
let total = 0;
for (const [, service, latency] of records) if (service === best) total += latency;
console.log(String(total));
