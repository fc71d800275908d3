// Starts Portkey's gateway (node_modules/@portkey-ai/gateway, the version in package-lock.json) bound
// to 127.0.0.1: its start-server.js listens on every interface and has no option for the address, so
// the first listen() on a bare port is given the loopback address. Arguments pass through
// (--port=N --headless).
import net from "node:net";

const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  if (typeof args[0] === "number" && (args[1] === undefined || typeof args[1] === "function")) {
    if (args[1] === undefined) args.splice(1, 1);
    args.splice(1, 0, "127.0.0.1");
  }
  return listen.apply(this, args);
};
await import("@portkey-ai/gateway/build/start-server.js");
