// Preloaded into Pi's node process only (`node --require`, never NODE_OPTIONS, so the
// programs a model runs do not get it): listens on the sandbox's own loopback, in its
// own network namespace, and pipes each connection to the model endpoint's unix socket
// bound into the sandbox. Pi's OpenAI client needs an http:// baseUrl; this is the
// only way out of the sandbox, and it leads only to this episode's endpoint.
"use strict";
const net = require("node:net");
const socketPath = process.env.PIEXP_ENDPOINT_SOCKET;
const port = Number(process.env.PIEXP_ENDPOINT_PORT);
delete process.env.PIEXP_ENDPOINT_SOCKET;
delete process.env.PIEXP_ENDPOINT_PORT;
if (socketPath && port) {
  const server = net.createServer((client) => {
    const upstream = net.connect(socketPath);
    // An idle pooled connection must not keep Pi alive once its work is done.
    client.unref();
    upstream.unref();
    client.pipe(upstream).pipe(client);
    const end = () => { client.destroy(); upstream.destroy(); };
    client.on("error", end);
    upstream.on("error", end);
    client.on("close", end);
    upstream.on("close", end);
  });
  server.listen(port, "127.0.0.1");
  server.unref(); // never keeps Pi alive after its work is done
}
