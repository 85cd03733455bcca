// daemon/worker/worker.h — `kvasird --worker`: a host that serves a slice
// of a leader's ring (docs/multi-host.md, "The relay").
//
// The worker listens; its leader connects (the leader's plan names each
// worker's address, so a worker needs no leader address and a restarted
// one is found by the same connect). Per leader, one at a time:
//
//   accept (cluster key handshake, net/auth.h)
//   ← Plan(plan)    create the segment from it, start stages r..S-1
//   → Plan(sized)   the smallest KV capacity of those stages
//   ← Plan(blocks)  the block counts for the whole ring
//   → Ready         once every stage serves
//   the worker's relay (relay/relay.h) until Bye or a lost link
//   stop the stages, remove the segment, wait for the next leader
//
// The model file must be at the plan's path on this host too (the same
// image or folder on every host). A stage that fails to start is told to
// the leader in a Refuse with the stage's own error.
#pragma once

#include <cstdint>
#include <string>

namespace kvasir {

struct WorkerArgs {
  std::string listen = "0.0.0.0:7710";  // ADDR:PORT
  std::string key_path;                 // the cluster key file (0600)
  std::string exe = "/proc/self/exe";   // what runs `--stage N --segment NAME`
  int leaders = 0;                      // serve this many leaders, then exit; 0: forever
  // Nothing heard from the leader for this long (it pings) ends its
  // session: a leader host gone without closing the connection must not
  // hold this worker from the next one.
  double link_timeout_s = 10;
};

// Runs the worker until SIGINT/SIGTERM (or `leaders` leaders served);
// the process's exit status.
int run_worker(const WorkerArgs& a);

}  // namespace kvasir
