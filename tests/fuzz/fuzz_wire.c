/*
 * fuzz_wire.c — libFuzzer target for the control plane's frame decoder
 * (runtime/cluster/proto/wire.c), the only code that reads bytes from the network.
 *
 * Any input must decode to a frame, "need more bytes", or a clean refusal;
 * never a crash, a read past the input, or a leak.  A decoded frame must
 * re-encode to exactly the bytes it came from (the layout has one encoding),
 * and the input is also walked as a stream of back-to-back frames, the way
 * a connection's receive buffer is, and through a real connection
 * (sf__conn over a socketpair) before and after authentication: before it,
 * the buffer never grows past a handshake frame's room.  Built by
 * scripts/fuzz.sh (FUZZ_TARGET=wire).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cluster.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char err[256];
  sf__frame f;
  long k = sf__wire_decode(data, size, &f, err, sizeof err);
  if (k > 0) {
    if ((size_t)k > size)
      abort();
    sf__wbuf b = {0};
    if (sf__wire_encode(&b, &f) != 0 || b.n != (size_t)k || memcmp(b.p, data, b.n) != 0)
      abort();
    sf__wbuf_free(&b);
    if (f.type == SF__F_GROUP_SETUP) {
      size_t off = 0;
      char addr[64];
      uint16_t port;
      for (uint32_t i = 0; i < f.u.group_setup.size; i++)
        if (!sf__wire_peer(f.u.group_setup.peers, &off, addr, sizeof addr, &port))
          abort(); /* the decoder promised a valid peer list */
    }
    if (f.type == SF__F_TRACE) {
      size_t off = 0;
      sf__trace_rec r;
      for (uint32_t i = 0; i < f.u.trace.count; i++)
        if (!sf__wire_trace_rec(f.u.trace.events, &off, &r) || r.name.n == 0 ||
            memchr(r.name.p, 0, r.name.n))
          abort(); /* the decoder promised valid records */
      if (off != f.u.trace.events.n)
        abort();
    }
  }
  /* As a stream: consume frames until the bytes run out or go bad. */
  size_t off = 0;
  while (off < size) {
    k = sf__wire_decode(data + off, size - off, &f, err, sizeof err);
    if (k <= 0)
      break;
    off += (size_t)k;
  }
  for (int authed = 0; authed < 2; authed++) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
      abort();
    /* What fits in the socket's buffer (inputs are small) and then EOF. */
    ssize_t w = size ? send(sv[1], data, size, MSG_DONTWAIT) : 0;
    (void)w;
    shutdown(sv[1], SHUT_WR);
    sf__conn c;
    sf__conn_init(&c, sv[0]);
    c.authed = authed;
    for (int round = 0; round < 10000; round++) {
      int r = sf__conn_fill(&c);
      int got;
      while ((got = sf__conn_next(&c, &f, err, sizeof err)) == 1)
        if (!authed && f.type != SF__F_CHALLENGE && f.type != SF__F_AUTH &&
            f.type != SF__F_AUTH_OK)
          abort(); /* only the handshake before authentication */
      if (!authed && c.rx_cap > 256)
        abort(); /* room for more than a handshake frame */
      if (got < 0 || r <= 0)
        break;
    }
    sf__conn_close(&c);
    close(sv[1]);
  }
  return 0;
}
