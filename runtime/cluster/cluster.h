/*
 * cluster.h — the cluster layer's internal names (prefix `sf__`), by side:
 * what main.c, the other layers' hooks and the unit tests see of multi-node
 * runs.  Generated code never sees this header.
 *
 * Key design choice: the layer is four sides with calls in one direction,
 *
 *     net/  <-  proto/  <-  head/
 *                      <-  worker/
 *
 * plumbing at the bottom (hosts, SSH, crypto, the TCP ring), the protocol
 * above it (proto/proto.h: every frame described once, the codec derived
 * from it), and the head's and the worker's code each on proto/ alone:
 * neither calls the other, they meet only in frames.  install.c, the one
 * file here that sees both, puts them into the scheduler's hooks.
 * tests/cluster/sides_test.py checks the direction with nm.
 *
 * Every module reports through a return code plus an error buffer (`char
 * *err, size_t errlen`), never by exiting, so unit tests drive each one
 * directly and the head can print one clear line per failed host.  Only
 * the head's start-up (head/launch.c) and the worker's main
 * (worker/worker_main.c) decide exit codes.
 *
 * Files, in the order a run meets them:
 *   net/hostfile.c   --nodes FILE or host1,host2 -> sf__hostlist
 *   net/sshconfig.c  ~/.ssh/config: each host -> sf__ssh_target (where, who, keys)
 *   net/knownhosts.c which known_hosts lines name a host; trusted, unknown,
 *                    changed or revoked (OpenSSH's rules, markers and ports)
 *   net/launcher.c   srun, mpirun, torchrun: this process's rank, rank 0's
 *                    address, the job's secret (a run with no --nodes)
 *   net/hostcheck.c  whether a host can run this executable: architecture,
 *                    glibc version, CPU features
 *   net/crypto.c     file hashing and HMAC-SHA256 on sha256.c (no libcrypto), random
 *   net/ssh.c        libssh2 (loaded with dlopen): connect, host key, auth, SFTP
 *                    deployment, exec of the worker with the secret on stdin
 *   net/ring.c       TCP collectives: allreduce by recursive doubling, halving
 *                    and doubling, or the pipelined ring, chosen by size; the
 *                    greeters that match data-plane connections to members
 *   net/net.c, note.c errors, addresses, shared blobs; notes on stderr
 *   proto/wire.c     frames encoded and decoded from the table in proto.h (the
 *                    decoder is fuzzed), framed connections, the handshake
 *   head/launch.c    the head's parallel start-up, shutdown and node table
 *   head/control.c   the head's control-plane thread: heartbeats, node loss,
 *                    greeters, worker output
 *   head/selftest.c  --sflow-selftest and the group bench across workers
 *   head/dispatch.c  task calls across nodes: submission, retries, future
 *                    arguments, head runners, node loss (remote_internal.h is
 *                    what placement.c and objects_head.c share with it)
 *   head/placement.c the ledger of slots and GPU shares; where tasks and actors go
 *   head/objects_head.c the head's side of the object store of large results
 *   head/ractor_head.c  actors and groups on other nodes, the head's handles
 *   head/trace_head.c   workers' trace events, node names and clock offsets
 *   head/metrics_head.c workers' --metrics-port figures, labelled by node
 *   worker/worker_main.c the worker process: connect back, prove, serve the head
 *   worker/worker_tasks.c the worker's runner threads; descriptor checks
 *   worker/objects_worker.c the results it keeps, served to the head and to
 *                    other workers (worker_internal.h: what its files share)
 *   worker/ractor_worker.c the actors a worker holds
 *   worker/group_ring.c a group member's collectives across nodes (TCP ring, NCCL)
 *   worker/trace_worker.c its trace events in batches to the head
 *   worker/metrics_worker.c its --metrics-port figures to the head
 *   install.c        the hooks of both sides in the scheduler
 */
#ifndef SF_CLUSTER_H
#define SF_CLUSTER_H

#include "net/net.h"
#include "proto/proto.h"
#include "head/head.h"
#include "worker/worker.h"

/* --------------------------------------------------------- install.c */

/* Installs task.c's placer and trace.c's cluster hooks (install.c; main.c,
 * before any thread). */
void sf__cluster_install(void);


#endif
