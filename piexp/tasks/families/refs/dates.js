// Reference for dates: nights = check_out - check_in in days (UTC, so no DST surprises),
// filtered by check-in weekday.
const fs = require("fs");

const query = {};
for (const line of fs.readFileSync("query.txt", "utf8").split("\n")) {
  const at = line.indexOf("=");
  if (at >= 0) query[line.slice(0, at).trim()] = line.slice(at + 1).trim();
}
const NAMES = ["Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"]; // getUTCDay order
const wanted = new Set(query.weekdays.split(",").map((name) => NAMES.indexOf(name)));
const toUtc = (s) => { const [y, m, d] = s.split("-").map(Number); return Date.UTC(y, m - 1, d); };
const lines = fs.readFileSync("bookings.csv", "utf8").split("\n").filter((l) => l.trim());
const header = lines[0].trim().split(",");
const col = Object.fromEntries(header.map((name, i) => [name, i]));
let total = 0;
for (const line of lines.slice(1)) {
  const f = line.trim().split(",");
  const start = toUtc(f[col.check_in]);
  const end = toUtc(f[col.check_out]);
  if (wanted.has(new Date(start).getUTCDay())) total += Math.round((end - start) / (24 * 60 * 60 * 1000));
}
console.log(String(total));
