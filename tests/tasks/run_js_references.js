// Runs one JavaScript reference program on many workspaces in a single node process, so
// that checking hundreds of tasks costs one node start-up instead of hundreds.
// Usage: node run_js_references.js REFERENCE.js < ["dir1", "dir2", ...]
// Prints a JSON array with one entry per workspace: its last printed line, or "error: ...".
const fs = require("fs");
const path = require("path");

const source = fs.readFileSync(process.argv[2], "utf8");
const workspaces = JSON.parse(fs.readFileSync(0, "utf8"));
const home = process.cwd();
const results = [];
for (const workspace of workspaces) {
  const printed = [];
  // The reference sees only `require` and a console whose log is recorded.
  const recordingConsole = { log: (...parts) => printed.push(parts.map(String).join(" ")) };
  try {
    process.chdir(path.resolve(home, workspace));
    new Function("require", "console", source)(require, recordingConsole);
    const lines = printed.join("\n").split("\n").map((l) => l.trim()).filter((l) => l);
    results.push(lines.length ? lines[lines.length - 1] : "");
  } catch (error) {
    results.push(`error: ${error && error.stack ? error.stack : error}`);
  } finally {
    process.chdir(home);
  }
}
process.stdout.write(JSON.stringify(results));
