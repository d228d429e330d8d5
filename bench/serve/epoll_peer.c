/*
 * epoll_peer.c — the HTTP floor std.serve's no-op route is measured
 * against (docs/performance.md, "HTTP floor (issue 34)"): one thread, one
 * epoll set, non-blocking sockets, keep-alive and pipelining, and no
 * allocation per request.  It answers every POST as examples/serve.sflow's
 * /noop does: the body's "n" back as {"n": N}.
 *
 *   cc -O2 -o epoll_peer bench/serve/epoll_peer.c
 *   ./epoll_peer [PORT]        # 0 or none: any free port
 *
 * prints "listening on http://127.0.0.1:PORT" and serves until SIGTERM.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#define BUF 16384

typedef struct conn {
  int fd;
  size_t len;      /* bytes of in */
  size_t out_len;  /* answer bytes not yet written */
  char in[BUF];
  char out[BUF];
} conn;

static volatile sig_atomic_t stopping;
static void on_term(int sig) { (void)sig; stopping = 1; }

/* The request's Content-Length (0 when it has none). */
static size_t content_length(const char *head, size_t n) {
  for (const char *p = head; p + 15 < head + n; p++)
    if ((p == head || p[-1] == '\n') && !strncasecmp(p, "Content-Length:", 15))
      return (size_t)strtoul(p + 15, NULL, 10);
  return 0;
}

/* {"n": N} from a body holding "n": N (0 when it does not). */
static int answer(const char *body, size_t n, char *to, size_t room) {
  long v = 0;
  for (size_t i = 0; i + 3 < n; i++)
    if (body[i] == '"' && body[i + 1] == 'n' && body[i + 2] == '"') {
      const char *p = memchr(body + i + 3, ':', n - i - 3);
      if (p)
        v = strtol(p + 1, NULL, 10);
      break;
    }
  char js[32];
  int jl = snprintf(js, sizeof js, "{\"n\": %ld}", v);
  return snprintf(to, room, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                  "Content-Length: %d\r\n\r\n%s", jl, js);
}

/* Answers every whole request in c->in; false when the connection ends. */
static bool serve(conn *c) {
  size_t at = 0;
  for (;;) {
    char *head = c->in + at;
    size_t have = c->len - at;
    char *end = memmem(head, have, "\r\n\r\n", 4);
    if (!end)
      break;
    size_t hlen = (size_t)(end - head) + 4, blen = content_length(head, hlen);
    if (hlen + blen > BUF)
      return false;
    if (hlen + blen > have)
      break;
    if (c->out_len + 256 > BUF)
      return false;
    c->out_len += (size_t)answer(head + hlen, blen, c->out + c->out_len, BUF - c->out_len);
    at += hlen + blen;
  }
  memmove(c->in, c->in + at, c->len - at);
  c->len -= at;
  while (c->out_len) {
    ssize_t w = write(c->fd, c->out, c->out_len);
    if (w < 0)
      return errno == EAGAIN; /* wrk reads every answer before its next request */
    memmove(c->out, c->out + w, c->out_len - (size_t)w);
    c->out_len -= (size_t)w;
  }
  return true;
}

int main(int argc, char **argv) {
  int port = argc > 1 ? atoi(argv[1]) : 0;
  signal(SIGPIPE, SIG_IGN);
  struct sigaction sa = {.sa_handler = on_term};
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  int ls = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0), one = 1;
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(ls, (struct sockaddr *)&a, sizeof a) || listen(ls, 1024)) {
    fprintf(stderr, "epoll_peer: cannot listen on port %d: %s\n", port, strerror(errno));
    return 1;
  }
  socklen_t al = sizeof a;
  getsockname(ls, (struct sockaddr *)&a, &al);
  printf("listening on http://127.0.0.1:%d\n", ntohs(a.sin_port));
  fflush(stdout);
  int ep = epoll_create1(EPOLL_CLOEXEC);
  struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
  epoll_ctl(ep, EPOLL_CTL_ADD, ls, &ev);
  struct epoll_event evs[256];
  while (!stopping) {
    int n = epoll_wait(ep, evs, 256, -1);
    for (int i = 0; i < n; i++) {
      conn *c = evs[i].data.ptr;
      if (!c) {
        int fd;
        while ((fd = accept4(ls, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
          setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
          conn *k = malloc(sizeof *k);
          k->fd = fd;
          k->len = k->out_len = 0;
          struct epoll_event e = {.events = EPOLLIN, .data.ptr = k};
          epoll_ctl(ep, EPOLL_CTL_ADD, fd, &e);
        }
        continue;
      }
      ssize_t r = read(c->fd, c->in + c->len, BUF - c->len);
      if ((r < 0 && errno == EAGAIN) || (r > 0 && (c->len += (size_t)r, serve(c))))
        continue;
      close(c->fd); /* also leaves the epoll set */
      free(c);
    }
  }
  return 0;
}
