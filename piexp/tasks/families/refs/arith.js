// Reference for arith: recursive-descent evaluation, floor-mod, weighted by line number.
// All values stay within +/-1e12, so plain JavaScript numbers are exact.
const fs = require("fs");

function readQuery(path) {
  const query = {};
  for (const line of fs.readFileSync(path, "utf8").split("\n")) {
    const at = line.indexOf("=");
    if (at >= 0) query[line.slice(0, at).trim()] = line.slice(at + 1).trim();
  }
  return query;
}

function evaluate(text) {
  const tokens = text.match(/\d+|[-+*()]/g);
  let pos = 0;
  const peek = () => (pos < tokens.length ? tokens[pos] : null);
  const take = () => tokens[pos++];
  function atom() {
    if (peek() === "(") {
      take();
      const value = expr();
      take(); // ")"
      return value;
    }
    return Number(take());
  }
  function term() {
    let value = atom();
    while (peek() === "*") {
      take();
      value *= atom();
    }
    return value;
  }
  function expr() {
    let value = term();
    while (peek() === "+" || peek() === "-") {
      const op = take();
      const right = term();
      value = op === "+" ? value + right : value - right;
    }
    return value;
  }
  return expr();
}

const modulus = Number(readQuery("query.txt").modulus);
const lines = fs.readFileSync("expressions.txt", "utf8").split("\n").map((l) => l.trim()).filter((l) => l);
let total = 0;
lines.forEach((line, index) => {
  const r = ((evaluate(line) % modulus) + modulus) % modulus; // JS % truncates; make it floor
  total += (index + 1) * r;
});
console.log(String(total));
