// Reference for number_theory: sieve once, prefix sums of qualifying primes, sum per range.
const fs = require("fs");

const query = {};
for (const line of fs.readFileSync("query.txt", "utf8").split("\n")) {
  const at = line.indexOf("=");
  if (at >= 0) query[line.slice(0, at).trim()] = line.slice(at + 1).trim();
}
const k = Number(query.k);
const ranges = fs.readFileSync("ranges.txt", "utf8").split("\n").filter((l) => l.trim()).map((l) => l.trim().split(/\s+/).map(Number));
const limit = Math.max(...ranges.map(([, b]) => b));
const composite = new Uint8Array(limit + 1);
composite[0] = 1;
if (limit >= 1) composite[1] = 1;
for (let i = 2; i * i <= limit; i++) if (!composite[i]) for (let j = i * i; j <= limit; j += i) composite[j] = 1;
const digitSum = (n) => { let s = 0; while (n > 0) { s += n % 10; n = Math.floor(n / 10); } return s; };
const prefix = new Array(limit + 1).fill(0);
let running = 0;
for (let n = 0; n <= limit; n++) {
  if (!composite[n] && digitSum(n) % k === 0) running += n;
  prefix[n] = running;
}
let total = 0;
for (const [a, b] of ranges) total += prefix[b] - prefix[a - 1];
console.log(String(total));
