/*
 * ssh.c — launching workers over SSH with libssh2: connect, check the host
 * key, authenticate, copy the executable with SFTP, and start it.
 *
 * Key design choices:
 *  - libssh2 is loaded with dlopen on first use (like libcrypto in
 *    crypto.c), so a program that never passes --nodes needs no SSH library
 *    and its link line is unchanged.  The headers give the prototypes; each
 *    entry point is looked up once into the table `L`.
 *  - The host key is checked against known_hosts right after the key
 *    exchange and BEFORE any authentication, so credentials never go to an
 *    impostor.  Only an exact match continues; a revoked key is refused
 *    whatever else lists it; an unknown key is refused unless
 *    --accept-new-host-keys (trust on first use, which still refuses a
 *    changed key).  The matching is knownhosts.c's (OpenSSH's rules for
 *    markers, ports, patterns and hashed names), not libssh2's.  The
 *    preferred host-key algorithms are set to the types known_hosts holds
 *    for the host, so a server that also has a key of another type is not
 *    mistaken for a changed one (libssh2 #42, #526).
 *  - Never prompt: keys are tried with no passphrase, the agent if there is
 *    one; a failure is an error naming the host, user and what was tried.
 *  - Where to connect, as whom, with which keys and known_hosts files comes
 *    resolved in an sf__ssh_target (sshconfig.c: hostfile, flags and
 *    ~/.ssh/config together), so this file never decides precedence.
 *  - Every blocking call runs under the session's timeout (--connect-timeout)
 *    and the TCP connect under a poll deadline, so an unreachable host fails
 *    fast with its name.
 *  - ProxyJump and ProxyCommand hand the session a socketpair instead of a
 *    TCP socket, so everything above the transport is one code path: a
 *    jump host is a whole session of its own (host key, auth) whose
 *    direct-tcpip channel a thread pumps to the socketpair, and a command
 *    gets the other end as stdin and stdout.  Errors name the hop.
 */
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <libssh2.h>
#include <libssh2_sftp.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "net.h"

/* ------------------------------------------------------------ loading */

#define SSH_FUNCS(X)                                                                        \
  X(libssh2_init) X(libssh2_session_init_ex) X(libssh2_session_set_blocking)                \
  X(libssh2_session_set_timeout) X(libssh2_session_handshake) X(libssh2_session_hostkey)    \
  X(libssh2_session_method_pref) X(libssh2_session_last_error)                              \
  X(libssh2_session_disconnect_ex) X(libssh2_session_free)                                  \
  X(libssh2_userauth_list) X(libssh2_userauth_authenticated)                                \
  X(libssh2_userauth_publickey_fromfile_ex) X(libssh2_agent_init) X(libssh2_agent_connect)  \
  X(libssh2_agent_list_identities) X(libssh2_agent_get_identity) X(libssh2_agent_userauth)  \
  X(libssh2_agent_disconnect) X(libssh2_agent_free) X(libssh2_sftp_init)                    \
  X(libssh2_sftp_shutdown) X(libssh2_sftp_stat_ex) X(libssh2_sftp_mkdir_ex)                 \
  X(libssh2_sftp_open_ex) X(libssh2_sftp_write) X(libssh2_sftp_close_handle)                \
  X(libssh2_sftp_rename_ex) X(libssh2_sftp_unlink_ex) X(libssh2_sftp_last_error)            \
  X(libssh2_channel_open_ex) X(libssh2_channel_process_startup) X(libssh2_channel_write_ex) \
  X(libssh2_channel_read_ex) X(libssh2_channel_eof) X(libssh2_channel_close)                \
  X(libssh2_channel_free) X(libssh2_channel_wait_closed) X(libssh2_channel_get_exit_status)   \
  X(libssh2_channel_get_exit_signal) X(libssh2_free) X(libssh2_channel_direct_tcpip_ex)        \
  X(libssh2_channel_send_eof) X(libssh2_session_block_directions)

static struct {
#define FIELD(name) __typeof__(name) *name;
  SSH_FUNCS(FIELD)
#undef FIELD
} L;
static char load_error[256];
static pthread_once_t load_once = PTHREAD_ONCE_INIT;
/* known_hosts is appended to by several connect threads at once. */
static pthread_mutex_t known_hosts_lock = PTHREAD_MUTEX_INITIALIZER;

static void load(void) {
  void *h = dlopen("libssh2.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    snprintf(load_error, sizeof load_error,
             "cannot load libssh2.so.1 (install libssh2-1; needed by --nodes): %s", dlerror());
    return;
  }
#define LOOKUP(name)                                                                \
  if (!(*(void **)&L.name = dlsym(h, #name))) {                                     \
    snprintf(load_error, sizeof load_error, "libssh2.so.1 lacks %s (need 1.10 or later)", \
             #name);                                                                \
    return;                                                                         \
  }
  SSH_FUNCS(LOOKUP)
#undef LOOKUP
  /* libssh2_init is not thread-safe: once, here, before any session. */
  if (L.libssh2_init(0))
    snprintf(load_error, sizeof load_error, "libssh2_init failed");
}

bool sf__ssh_load(char *err, size_t errlen) {
  pthread_once(&load_once, load);
  if (load_error[0]) {
    if (errlen)
      snprintf(err, errlen, "%s", load_error);
    return false;
  }
  return true;
}

/* ------------------------------------------------------------ session */

struct sf__ssh {
  LIBSSH2_SESSION *sess;
  LIBSSH2_CHANNEL *chan;
  int fd;
  int timeout_ms;
  char label[600];   /* the host for messages (sf__ssh_target.label) */
  bool mid_line[2];  /* pump: the last byte copied of stdout/stderr was not '\n' */
  char signal[16];   /* read_until: the signal that ended the command, or "" */
  /* Through a jump host: via is its session, which the pump thread owns
   * from the tunnel's opening on (tunnel.c's part below); fd is then our
   * end of a socketpair whose other end, via->tunnel_fd, the pump joins
   * to via's direct-tcpip channel (via->chan).  Through a ProxyCommand:
   * fd is our end of the socketpair the command's shell has as its stdin
   * and stdout. */
  struct sf__ssh *via;
  pthread_t pump;
  bool pumping;
  int tunnel_fd;
  pid_t proxy_pid;
  char host[256]; /* what was connected to, for local_addr */
  int port;
};

__attribute__((format(printf, 4, 5))) static int fail(const sf__ssh *s, char *err, size_t errlen,
                                                      const char *fmt, ...) {
  if (!errlen)
    return -1;
  int k = snprintf(err, errlen, "%s: ", s->label);
  va_list ap;
  va_start(ap, fmt);
  if (k >= 0 && (size_t)k < errlen)
    vsnprintf(err + k, errlen - (size_t)k, fmt, ap);
  va_end(ap);
  return -1;
}

static const char *lib_error(const sf__ssh *s) {
  char *msg = NULL;
  int n = 0;
  if (!s->sess)
    return "no session";
  L.libssh2_session_last_error(s->sess, &msg, &n, 0);
  return msg && *msg ? msg : "unknown libssh2 error";
}

/* TCP connect to every address of the host in turn, within the deadline. */
static int tcp_connect(sf__ssh *s, const sf__ssh_target *t, int64_t deadline, char *err,
                       size_t errlen) {
  char port[8];
  snprintf(port, sizeof port, "%d", t->port);
  struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
  int g = getaddrinfo(t->host, port, &hints, &ai);
  if (g)
    return fail(s, err, errlen, "cannot resolve host: %s", gai_strerror(g));
  int last = ETIMEDOUT;
  for (struct addrinfo *a = ai; a; a = a->ai_next) {
    int fd = socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
      continue;
    int rc = connect(fd, a->ai_addr, a->ai_addrlen);
    if (rc && errno == EINPROGRESS) {
      struct pollfd pf = {fd, POLLOUT, 0};
      int left = (int)(deadline - sf__now_ms());
      int e = ETIMEDOUT;
      socklen_t el = sizeof e;
      if (left > 0 && poll(&pf, 1, left) == 1)
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &el);
      rc = e ? -1 : 0;
      errno = e;
    }
    if (rc == 0) {
      fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
      /* SSH is a dialogue of small packets (channel open, exec request,
       * SFTP calls): with Nagle's algorithm each one that follows an
       * unacknowledged one waits for the peer's delayed ACK, about 40 ms
       * a step on Linux, as OpenSSH's client also avoids. */
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      freeaddrinfo(ai);
      return fd;
    }
    last = errno;
    close(fd);
    if (sf__now_ms() >= deadline)
      break;
  }
  freeaddrinfo(ai);
  if (last == ETIMEDOUT)
    return fail(s, err, errlen, "cannot connect: no answer within %d s (host unreachable?)",
                s->timeout_ms / 1000);
  return fail(s, err, errlen, "cannot connect: %s", strerror(last));
}

/* ----------------------------------------------------------- host key */

/* The host-key algorithms for a key type as known_hosts names it. */
static const char *method_of_type(const char *type) {
  if (!strcmp(type, "ssh-rsa"))
    return "rsa-sha2-512,rsa-sha2-256,ssh-rsa"; /* one key, three signatures */
  static const char *const known[] = {"ssh-ed25519", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384",
                                      "ecdsa-sha2-nistp521", "ssh-dss"};
  for (size_t i = 0; i < sizeof known / sizeof *known; i++)
    if (!strcmp(type, known[i]))
      return known[i];
  return NULL;
}

/* The name known_hosts uses, as OpenSSH: the HostKeyAlias alone, else the
 * host after HostName substitution, "host" on port 22 and "[host]:port"
 * otherwise. */
static void kh_name(const sf__ssh_target *t, char *buf, size_t n) {
  sf__kh_name(t->key_host, t->key_port, buf, n);
}

/* Reads every known_hosts file of the host with key (NULL: only the key
 * types it lists) into r. */
static int known_hosts(sf__ssh *s, const sf__ssh_target *t, const uint8_t *key, size_t len,
                       sf__kh_result *r, char *err, size_t errlen) {
  char name[300], why[SF__SSH_PATH + 128];
  kh_name(t, name, sizeof name);
  *r = (sf__kh_result){0};
  for (int i = 0; i < t->nknown; i++)
    if (sf__kh_check_file(t->known[i], name, key, len, r, why, sizeof why))
      return fail(s, err, errlen, "%s", why);
  return 0;
}

/* Asks for the host-key algorithms known_hosts has for this host (hashed
 * entries too). */
static void prefer_known_types(sf__ssh *s, const sf__kh_result *r) {
  char list[512] = "";
  const char *p = r->types;
  while (*p) {
    const char *comma = strchr(p, ',');
    char one[64];
    size_t k = comma ? (size_t)(comma - p) : strlen(p);
    snprintf(one, sizeof one, "%.*s", (int)k, p);
    const char *m = method_of_type(one);
    if (m && !strstr(list, m) && strlen(list) + strlen(m) + 2 < sizeof list)
      snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", *list ? "," : "", m);
    p = comma ? comma + 1 : p + k;
  }
  if (*list && L.libssh2_session_method_pref(s->sess, LIBSSH2_METHOD_HOSTKEY, list) != 0) {
    /* An algorithm this libssh2 lacks: keep its defaults; the check below
     * still refuses anything but an exact match. */
  }
}

/* Appends the host's key to known_hosts (trust on first use).  The file is
 * locked so that parallel connects and other runs do not interleave. */
static int add_known(sf__ssh *s, const sf__ssh_target *t, const char *path, const uint8_t *key,
                     size_t len, char *err, size_t errlen) {
  char name[300], line[16800];
  kh_name(t, name, sizeof name);
  if (sf__kh_line(name, key, len, line, sizeof line))
    return fail(s, err, errlen, "cannot record a host key of %zu bytes", len);
  pthread_mutex_lock(&known_hosts_lock);
  int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
  bool ok = fd >= 0 && flock(fd, LOCK_EX) == 0 && sf__write_all(fd, line, strlen(line));
  int e2 = errno;
  if (fd >= 0)
    close(fd);
  pthread_mutex_unlock(&known_hosts_lock);
  if (!ok)
    return fail(s, err, errlen, "cannot add the host key to %s: %s", path, strerror(e2));
  return 0;
}

/* The known_hosts files for messages: "FILE" or "FILE1, FILE2". */
static const char *kh_files(const sf__ssh_target *t, char *buf, size_t n) {
  buf[0] = '\0';
  for (int i = 0; i < t->nknown; i++)
    snprintf(buf + strlen(buf), n - strlen(buf), "%s%s", i ? ", " : "", t->known[i]);
  return t->nknown ? buf : "any known_hosts file: UserKnownHostsFile none";
}

static int check_host_key(sf__ssh *s, const sf__ssh_target *t, char *err, size_t errlen) {
  char files[SF__SSH_KH_MAX * (SF__SSH_PATH + 2)];
  const char *path = kh_files(t, files, sizeof files);
  size_t len = 0;
  int type = 0;
  const uint8_t *key = (const uint8_t *)L.libssh2_session_hostkey(s->sess, &len, &type);
  if (!key || !len)
    return fail(s, err, errlen, "the server sent no host key; refusing to connect");
  sf__kh_result r;
  if (known_hosts(s, t, key, len, &r, err, errlen))
    return -1;
  switch (r.status) {
  case SF__KH_MATCH: return 0;
  case SF__KH_REVOKED:
    return fail(s, err, errlen,
                "host key is REVOKED (marked @revoked at %s); refusing to connect", r.where);
  case SF__KH_MISMATCH:
    return fail(s, err, errlen,
                "host key has CHANGED (does not match %s); refusing to connect. Someone may be "
                "impersonating the host; if it was reinstalled, remove its old key with "
                "ssh-keygen -R",
                r.where);
  case SF__KH_NOTFOUND:
    if (!t->accept_new)
      return fail(s, err, errlen,
                  "unknown host key (not in %s); refusing to connect. Add it with ssh-keyscan "
                  "or pass --accept-new-host-keys",
                  path);
    /* UserKnownHostsFile none with accept-new: trusted for this run only. */
    return t->nknown ? add_known(s, t, t->known[0], key, len, err, errlen) : 0;
  }
  return fail(s, err, errlen, "host key check failed");
}

/* --------------------------------------------------------------- auth */

static bool try_key(sf__ssh *s, const char *user, const char *priv) {
  char pub[4096];
  snprintf(pub, sizeof pub, "%s.pub", priv);
  const char *pubp = access(pub, R_OK) == 0 ? pub : NULL;
  /* A NULL passphrase: an encrypted key fails here instead of prompting. */
  return L.libssh2_userauth_publickey_fromfile_ex(s->sess, user, (unsigned)strlen(user), pubp,
                                                  priv, NULL) == 0;
}

/* The key blob of the public key next to a private key file (FILE.pub:
 * "type base64 comment"), decoded into out; 0 when there is none. */
static size_t pub_blob(const char *priv, unsigned char *out, size_t cap) {
  char path[SF__SSH_PATH + 8], line[16384];
  snprintf(path, sizeof path, "%s.pub", priv);
  FILE *f = fopen(path, "r");
  if (!f)
    return 0;
  bool ok = fgets(line, sizeof line, f) != NULL;
  fclose(f);
  char *b64 = ok ? strchr(line, ' ') : NULL;
  if (!b64)
    return 0;
  b64++;
  long n = sf__base64_decode(b64, strcspn(b64, " \r\n"), out, cap);
  return n > 0 ? (size_t)n : 0;
}

/* IdentitiesOnly: an agent key is used only when it is one of the
 * IdentityFiles (their .pub files say which), as in ssh. */
static bool listed_identity(const sf__ssh_target *t, const struct libssh2_agent_publickey *id) {
  unsigned char blob[8192];
  for (int i = 0; i < t->nids; i++) {
    size_t n = pub_blob(t->ids[i], blob, sizeof blob);
    if (n && n == id->blob_len && !memcmp(blob, id->blob, n))
      return true;
  }
  return false;
}

static bool try_agent(sf__ssh *s, const sf__ssh_target *t) {
  if (!getenv("SSH_AUTH_SOCK") || !*getenv("SSH_AUTH_SOCK"))
    return false;
  LIBSSH2_AGENT *a = L.libssh2_agent_init(s->sess);
  bool ok = false;
  if (a && L.libssh2_agent_connect(a) == 0 && L.libssh2_agent_list_identities(a) == 0) {
    struct libssh2_agent_publickey *id = NULL, *prev = NULL;
    while (!ok && L.libssh2_agent_get_identity(a, &id, prev) == 0) {
      if (!t->identities_only || listed_identity(t, id))
        ok = L.libssh2_agent_userauth(a, t->user, id) == 0;
      prev = id;
    }
    L.libssh2_agent_disconnect(a);
  }
  if (a)
    L.libssh2_agent_free(a);
  return ok;
}

/* Appends item to a "tried" list while it fits. */
static void note_tried(char *tried, size_t n, const char *item) {
  if (strlen(tried) + strlen(item) + 3 < n) {
    if (*tried)
      strcat(tried, ", ");
    strcat(tried, item);
  }
}

static int authenticate(sf__ssh *s, const sf__ssh_target *t, char *err, size_t errlen) {
  const char *user = t->user;
  char *methods = L.libssh2_userauth_list(s->sess, user, (unsigned)strlen(user));
  if (!methods) {
    if (L.libssh2_userauth_authenticated(s->sess))
      return 0;
    return fail(s, err, errlen, "cannot list authentication methods for %s: %s", user,
                lib_error(s));
  }
  if (!strstr(methods, "publickey"))
    return fail(s, err, errlen, "server does not offer public-key authentication (offers: %s)",
                methods);
  if (t->ids_from_flag) {
    if (access(t->ids[0], R_OK))
      return fail(s, err, errlen, "cannot read --ssh-key %s: %s", t->ids[0], strerror(errno));
    if (try_key(s, user, t->ids[0]))
      return 0;
    return fail(s, err, errlen,
                "public-key authentication as %s with %s failed: %s (an encrypted key needs "
                "ssh-agent: sflow never prompts)",
                user, t->ids[0], lib_error(s));
  }
  /* As ssh: the agent's keys first, then the key files (IdentityFile, or
   * the default names), missing ones skipped. */
  char tried[1024] = "", looked[1024] = "";
  if (getenv("SSH_AUTH_SOCK") && *getenv("SSH_AUTH_SOCK")) {
    if (try_agent(s, t))
      return 0;
    note_tried(tried, sizeof tried, "ssh-agent");
  }
  for (int i = 0; i < t->nids; i++) {
    note_tried(looked, sizeof looked, t->ids[i]);
    if (access(t->ids[i], R_OK))
      continue;
    if (try_key(s, user, t->ids[i]))
      return 0;
    note_tried(tried, sizeof tried, t->ids[i]);
  }
  if (!*tried)
    return fail(s, err, errlen,
                "no SSH credentials: no ssh-agent and no key file (looked for %s); pass "
                "--ssh-key or set IdentityFile in ~/.ssh/config",
                looked);
  return fail(s, err, errlen, "authentication as %s failed (tried %s)", user, tried);
}

/* ------------------------------------------------------------ connect */

/* ------------------------------------------------------------ proxies */

/* A jump host's direct-tcpip channel, joined to one end of a socketpair
 * whose other end the next session uses as its socket: libssh2 wants a
 * file descriptor, and this keeps every session on the next hop the same
 * code as on TCP.  The thread owns the jump host's session (libssh2
 * sessions are not thread-safe) and runs it non-blocking, with a buffer
 * each way, so that neither side waits on the other: a full socketpair
 * never stops the channel's reads, and a closed window never stops the
 * socketpair's.  It ends when our side closes (the session over it is
 * over) or the channel does (the host closed or the jump host is gone),
 * and then closes the jump host's session, and so the one before. */
static void *pump_tunnel(void *arg) {
  sf__ssh *h = arg;
  enum { CAP = 1 << 16 };
  char *up = malloc(CAP), *down = malloc(CAP);
  size_t nup = 0, ndown = 0;
  bool ours_closed = false, theirs_closed = false, lost = !up || !down;
  int fd = h->tunnel_fd;
  L.libssh2_session_set_blocking(h->sess, 0);
  while (!lost) {
    bool moved = false;
    if (!ours_closed && nup < CAP) {
      ssize_t k = recv(fd, up + nup, CAP - nup, MSG_DONTWAIT);
      if (k > 0)
        nup += (size_t)k, moved = true;
      else if (k == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
        ours_closed = moved = true;
    }
    if (nup) {
      ssize_t w = L.libssh2_channel_write_ex(h->chan, 0, up, nup);
      if (w > 0) {
        memmove(up, up + w, nup - (size_t)w);
        nup -= (size_t)w;
        moved = true;
      } else if (w < 0 && w != LIBSSH2_ERROR_EAGAIN) {
        lost = true; /* 0 and EAGAIN: the channel's window is full for now */
      }
    }
    if (ours_closed && !nup)
      break;
    if (!theirs_closed && ndown < CAP) {
      ssize_t r = L.libssh2_channel_read_ex(h->chan, 0, down + ndown, CAP - ndown);
      if (r > 0)
        ndown += (size_t)r, moved = true;
      else if ((r == 0 && L.libssh2_channel_eof(h->chan)) || (r < 0 && r != LIBSSH2_ERROR_EAGAIN))
        theirs_closed = moved = true;
    }
    if (ndown) {
      ssize_t w = send(fd, down, ndown, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (w > 0) {
        memmove(down, down + w, ndown - (size_t)w);
        ndown -= (size_t)w;
        moved = true;
      } else if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        break;
      }
    }
    if (theirs_closed && !ndown)
      break;
    if (moved)
      continue;
    int dirs = L.libssh2_session_block_directions(h->sess);
    struct pollfd pf[2] = {
        {fd, (short)((!ours_closed && nup < CAP ? POLLIN : 0) | (ndown ? POLLOUT : 0)), 0},
        {h->fd, (short)((ndown < CAP || nup ? POLLIN : 0) |
                        (dirs & LIBSSH2_SESSION_BLOCK_OUTBOUND ? POLLOUT : 0)), 0}};
    poll(pf, 2, 100); /* bounded: libssh2 may hold data it read already */
  }
  /* The session over the tunnel sees the end as a closed socket. */
  shutdown(fd, SHUT_RDWR);
  free(up);
  free(down);
  sf__ssh_close(h, lost || theirs_closed);
  return NULL;
}

static int connect_one(const sf__ssh_target *t, const sf__ssh_opts *o, sf__ssh **out, char *err,
                       size_t errlen);

/* ProxyJump: the jump host as a host of its own (its host key checked,
 * its user authenticated), then a direct-tcpip channel from it to t. */
static int tunnel_through(sf__ssh *s, const sf__ssh_target *t, const sf__ssh_opts *o, char *err,
                          size_t errlen) {
  sf__ssh *h;
  char why[1024];
  if (connect_one(t->jump, o, &h, why, sizeof why))
    return fail(s, err, errlen, "jump host %s", why);
  h->chan = L.libssh2_channel_direct_tcpip_ex(h->sess, t->host, t->port, "127.0.0.1", 22);
  if (!h->chan) {
    fail(s, err, errlen, "jump host %s could not open a connection to %s port %d: %s",
         h->label, t->host, t->port, lib_error(h));
    sf__ssh_close(h, true);
    return -1;
  }
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv)) {
    fail(s, err, errlen, "cannot make a socketpair: %s", strerror(errno));
    sf__ssh_close(h, true);
    return -1;
  }
  s->fd = sv[0];
  h->tunnel_fd = sv[1];
  if (pthread_create(&s->pump, NULL, pump_tunnel, h)) {
    sf__ssh_close(h, true);
    return fail(s, err, errlen, "cannot start the tunnel's thread");
  }
  s->via = h;
  s->pumping = true;
  return 0;
}

/* ProxyCommand: /bin/sh -c 'exec COMMAND' with one end of a socketpair
 * as its stdin and stdout, as ssh runs it (stderr stays ours). */
static int spawn_proxy(sf__ssh *s, const sf__ssh_target *t, char *err, size_t errlen) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv))
    return fail(s, err, errlen, "cannot make a socketpair: %s", strerror(errno));
  char cmd[sizeof t->proxy_command + 8];
  snprintf(cmd, sizeof cmd, "exec %s", t->proxy_command);
  char *argv[] = {"sh", "-c", cmd, NULL};
  extern char **environ;
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t at;
  sigset_t none;
  sigemptyset(&none);
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, sv[1], 0);
  posix_spawn_file_actions_adddup2(&fa, sv[1], 1);
  posix_spawnattr_init(&at);
  posix_spawnattr_setsigmask(&at, &none); /* not the connect thread's mask */
  posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK);
  pid_t pid;
  int rc = posix_spawn(&pid, "/bin/sh", &fa, &at, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&at);
  close(sv[1]);
  if (rc) {
    close(sv[0]);
    return fail(s, err, errlen, "cannot run ProxyCommand: %s", strerror(rc));
  }
  s->fd = sv[0];
  s->proxy_pid = pid;
  return 0;
}

/* Why the ProxyCommand ended, when it did: " (ProxyCommand 'nc x 22'
 * exited with status 1)", or "". */
static void proxy_exit(sf__ssh *s, const sf__ssh_target *t, char *buf, size_t n) {
  buf[0] = '\0';
  int st;
  for (int i = 0; s->proxy_pid > 0 && i < 20; i++) {
    if (waitpid(s->proxy_pid, &st, WNOHANG) == s->proxy_pid) {
      s->proxy_pid = 0;
      if (WIFEXITED(st))
        snprintf(buf, n, " (ProxyCommand '%.300s' exited with status %d)", t->proxy_command,
                 WEXITSTATUS(st));
      else
        snprintf(buf, n, " (ProxyCommand '%.300s' was killed by signal %d)", t->proxy_command,
                 WTERMSIG(st));
      return;
    }
    struct timespec ts = {0, 10 * 1000 * 1000};
    nanosleep(&ts, NULL); /* it may be on its way out: the socket closed first */
  }
}

/* ------------------------------------------------------------ connect */

static int connect_one(const sf__ssh_target *t, const sf__ssh_opts *o, sf__ssh **out, char *err,
                       size_t errlen) {
  *out = NULL;
  sf__ssh *s = calloc(1, sizeof *s);
  if (!s)
    return -1;
  s->fd = s->tunnel_fd = -1;
  s->timeout_ms = (o->timeout_s > 0 ? o->timeout_s : 10) * 1000;
  snprintf(s->label, sizeof s->label, "%s", t->label);
  snprintf(s->host, sizeof s->host, "%s", t->host);
  s->port = t->port;
  int64_t deadline = sf__now_ms() + s->timeout_ms;
  if (t->jump ? tunnel_through(s, t, o, err, errlen)
      : t->proxy_command[0] ? spawn_proxy(s, t, err, errlen)
                           : (s->fd = tcp_connect(s, t, deadline, err, errlen)) < 0)
    goto fail;
  s->sess = L.libssh2_session_init_ex(NULL, NULL, NULL, NULL);
  if (!s->sess) {
    fail(s, err, errlen, "cannot create an SSH session");
    goto fail;
  }
  L.libssh2_session_set_blocking(s->sess, 1);
  /* The handshake and authentication share what is left of the connect
   * budget; later operations (copies) get the full timeout each. */
  L.libssh2_session_set_timeout(s->sess, (long)(deadline - sf__now_ms() > 100 ? deadline - sf__now_ms()
                                                                          : 100));
  sf__kh_result kr;
  if (known_hosts(s, t, NULL, 0, &kr, err, errlen))
    goto fail;
  prefer_known_types(s, &kr);
  if (L.libssh2_session_handshake(s->sess, s->fd)) {
    char why[400];
    proxy_exit(s, t, why, sizeof why);
    fail(s, err, errlen, "SSH handshake failed: %s%s", lib_error(s), why);
    goto fail;
  }
  if (check_host_key(s, t, err, errlen))
    goto fail;
  if (authenticate(s, t, err, errlen))
    goto fail;
  L.libssh2_session_set_timeout(s->sess, s->timeout_ms);
  *out = s;
  return 0;
fail:
  sf__ssh_close(s, true);
  return -1;
}

int sf__ssh_connect(const sf__ssh_target *t, const sf__ssh_opts *o, sf__ssh **out, char *err,
                    size_t errlen) {
  *out = NULL;
  if (!sf__ssh_load(err, errlen))
    return -1;
  return connect_one(t, o, out, err, errlen);
}

/* The address this machine sends from to host:port, if it has a route
 * there (a UDP connect sends nothing). */
static int route_source(const char *host, int port, struct sockaddr_storage *addr,
                        socklen_t *len) {
  char ps[8];
  snprintf(ps, sizeof ps, "%d", port);
  struct addrinfo hints = {.ai_socktype = SOCK_DGRAM}, *ai = NULL;
  if (getaddrinfo(host, ps, &hints, &ai))
    return -1;
  int rc = -1;
  for (struct addrinfo *a = ai; a && rc; a = a->ai_next) {
    int fd = socket(a->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
      continue;
    *len = sizeof *addr;
    if (!connect(fd, a->ai_addr, a->ai_addrlen) &&
        !getsockname(fd, (struct sockaddr *)addr, len))
      rc = 0;
    close(fd);
  }
  freeaddrinfo(ai);
  return rc;
}

int sf__ssh_local_addr(sf__ssh *s, struct sockaddr_storage *addr, socklen_t *len) {
  *len = sizeof *addr;
  if (!s->via && !s->proxy_pid)
    return getsockname(s->fd, (struct sockaddr *)addr, len);
  /* Through a jump host or a command the socket is a socketpair, and the
   * worker still dials the head directly (docs/cluster.md): from where
   * this machine reaches the host, else from where it reached the first
   * jump host. */
  if (!route_source(s->host, s->port, addr, len))
    return 0;
  return s->via ? sf__ssh_local_addr(s->via, addr, len) : -1;
}

int sf__ssh_socket(sf__ssh *s) { return s->fd; }

/* ------------------------------------------------------------- deploy */

static unsigned long sftp_errno(LIBSSH2_SFTP *sftp) { return L.libssh2_sftp_last_error(sftp); }

static bool remote_file_size(LIBSSH2_SFTP *sftp, const char *path, uint64_t *size) {
  LIBSSH2_SFTP_ATTRIBUTES a;
  if (L.libssh2_sftp_stat_ex(sftp, path, (unsigned)strlen(path), LIBSSH2_SFTP_STAT, &a))
    return false;
  *size = a.filesize;
  return LIBSSH2_SFTP_S_ISREG(a.permissions);
}

static void mkdirs(LIBSSH2_SFTP *sftp, const char *dir) {
  char buf[1024];
  snprintf(buf, sizeof buf, "%s", dir);
  for (char *p = buf + 1;; p++) {
    if (*p == '/' || !*p) {
      char c = *p;
      *p = '\0';
      L.libssh2_sftp_mkdir_ex(sftp, buf, (unsigned)strlen(buf), 0700);
      *p = c;
      if (!c)
        break;
    }
  }
}

static int upload(sf__ssh *s, LIBSSH2_SFTP *sftp, const char *local, const char *tmp, char *err,
                  size_t errlen) {
  int fd = open(local, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return fail(s, err, errlen, "cannot open %s: %s", local, strerror(errno));
  LIBSSH2_SFTP_HANDLE *f = L.libssh2_sftp_open_ex(
      sftp, tmp, (unsigned)strlen(tmp), LIBSSH2_FXF_WRITE | LIBSSH2_FXF_CREAT | LIBSSH2_FXF_TRUNC,
      0700, LIBSSH2_SFTP_OPENFILE);
  if (!f) {
    close(fd);
    return fail(s, err, errlen, "cannot create %s on the host: %s (SFTP error %lu)", tmp,
                lib_error(s), sftp_errno(sftp));
  }
  /* On the heap: a thread-local buffer would be part of every thread's
   * static TLS, 1 MiB zeroed for each of thousands of pool threads. */
  enum { BUF = 1 << 20 };
  char *buf = malloc(BUF);
  int rc = buf ? 0 : fail(s, err, errlen, "copying the executable: out of memory");
  while (!rc) {
    ssize_t k = read(fd, buf, BUF);
    if (k < 0 && errno == EINTR)
      continue;
    if (k <= 0) {
      rc = k < 0 ? fail(s, err, errlen, "cannot read %s: %s", local, strerror(errno)) : 0;
      break;
    }
    for (ssize_t off = 0; off < k && !rc;) {
      ssize_t w = L.libssh2_sftp_write(f, buf + off, (size_t)(k - off));
      if (w <= 0)
        rc = fail(s, err, errlen, "copying the executable failed: %s", lib_error(s));
      else
        off += w;
    }
  }
  free(buf);
  close(fd);
  if (L.libssh2_sftp_close_handle(f) && !rc)
    rc = fail(s, err, errlen, "closing the copy failed: %s", lib_error(s));
  return rc;
}

int sf__ssh_deploy(sf__ssh *s, const char *local_path, const char *hash_hex,
                   const char *remote_dir, char *path, size_t pathlen, bool *copied, char *err,
                   size_t errlen) {
  *copied = false;
  struct stat st;
  if (stat(local_path, &st))
    return fail(s, err, errlen, "cannot stat %s: %s", local_path, strerror(errno));
  LIBSSH2_SFTP *sftp = L.libssh2_sftp_init(s->sess);
  if (!sftp)
    return fail(s, err, errlen, "cannot start SFTP: %s", lib_error(s));
  /* The file name carries the content hash, and a copy only appears under
   * it by rename once complete, so a name that exists with the right size
   * was this executable; the worker then hashes the file it runs before
   * anything else (launch.c copies a damaged one again) and sends the
   * hash in its hello. */
  snprintf(path, pathlen, "%s/sflow-%s", remote_dir, hash_hex);
  int rc = 0;
  uint64_t size = 0;
  if (!remote_file_size(sftp, path, &size) || size != (uint64_t)st.st_size) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", path);
    *strrchr(dir, '/') = '\0';
    mkdirs(sftp, dir);
    uint8_t r[6];
    char rhex[13], tmp[1200];
    sf__random_bytes(r, sizeof r);
    sf__hex(r, sizeof r, rhex);
    snprintf(tmp, sizeof tmp, "%s/.sflow-%s.%s.tmp", dir, hash_hex, rhex);
    rc = upload(s, sftp, local_path, tmp, err, errlen);
    if (!rc && L.libssh2_sftp_rename_ex(sftp, tmp, (unsigned)strlen(tmp), path,
                                        (unsigned)strlen(path),
                                        LIBSSH2_SFTP_RENAME_OVERWRITE |
                                            LIBSSH2_SFTP_RENAME_ATOMIC |
                                            LIBSSH2_SFTP_RENAME_NATIVE)) {
      /* SFTP v3 servers refuse to rename over an existing file: another run
       * (or another node on a shared home) won the race, which is fine
       * when its copy is complete. */
      if (!remote_file_size(sftp, path, &size) || size != (uint64_t)st.st_size)
        rc = fail(s, err, errlen, "cannot move the copy into %s: %s", path, lib_error(s));
    }
    if (rc || remote_file_size(sftp, tmp, &size))
      L.libssh2_sftp_unlink_ex(sftp, tmp, (unsigned)strlen(tmp));
    *copied = !rc;
  }
  L.libssh2_sftp_shutdown(sftp);
  return rc;
}

/* --------------------------------------------------------------- exec */

int sf__ssh_start(sf__ssh *s, const char *cmd, char *err, size_t errlen) {
  if (s->chan) {
    L.libssh2_channel_close(s->chan);
    L.libssh2_channel_free(s->chan);
    s->chan = NULL;
    s->mid_line[0] = s->mid_line[1] = false;
  }
  s->chan = L.libssh2_channel_open_ex(s->sess, "session", 7, LIBSSH2_CHANNEL_WINDOW_DEFAULT,
                                      LIBSSH2_CHANNEL_PACKET_DEFAULT, NULL, 0);
  if (!s->chan)
    return fail(s, err, errlen, "cannot open an SSH channel: %s", lib_error(s));
  if (L.libssh2_channel_process_startup(s->chan, "exec", 4, cmd, (unsigned)strlen(cmd)))
    return fail(s, err, errlen, "cannot start a command: %s", lib_error(s));
  return 0;
}

/* Signal numbers by name, for messages: the SSH exit-signal names a
 * signal without its number ("KILL"); these are the same on every Linux. */
static int signal_number(const char *name) {
  static const char *const names[] = {"",     "HUP",  "INT",  "QUIT", "ILL",  "TRAP",
                                      "ABRT", "BUS",  "FPE",  "KILL", "USR1", "SEGV",
                                      "USR2", "PIPE", "ALRM", "TERM"};
  for (int i = 1; i < (int)(sizeof names / sizeof *names); i++)
    if (!strcmp(name, names[i]))
      return i;
  return 0;
}

/* How the command that just ended did (after its EOF): ": killed by
 * SIGKILL (signal 9)" or ": exit status 2", into how ("" when sshd did
 * not say); its signal's name in s->signal. */
static void exit_of(sf__ssh *s, char *how, size_t n) {
  how[0] = s->signal[0] = '\0';
  /* sshd sends the exit status or signal before it closes the channel,
   * not necessarily before the EOF of the output. */
  if (L.libssh2_channel_wait_closed(s->chan))
    return;
  char *sig = NULL;
  size_t sl = 0;
  if (!L.libssh2_channel_get_exit_signal(s->chan, &sig, &sl, NULL, NULL, NULL, NULL) && sig) {
    snprintf(s->signal, sizeof s->signal, "%.*s", (int)sl, sig);
    L.libssh2_free(s->sess, sig);
    int no = signal_number(s->signal);
    if (no)
      snprintf(how, n, ": killed by SIG%s (signal %d)", s->signal, no);
    else
      snprintf(how, n, ": killed by SIG%s", s->signal);
    return;
  }
  snprintf(how, n, ": exit status %d", L.libssh2_channel_get_exit_status(s->chan));
}

const char *sf__ssh_signal(const sf__ssh *s) { return s->signal; }

int sf__ssh_read_until(sf__ssh *s, const char *marker, const char *what, char *out,
                       size_t outlen, char *err, size_t errlen) {
  size_t n = 0, mlen = strlen(marker);
  out[0] = '\0';
  for (;;) {
    /* Done when a line starts with the marker and is complete. */
    for (const char *p = out; (p = strstr(p, marker)); p++)
      if ((p == out || p[-1] == '\n') && strchr(p + mlen, '\n') &&
          (p[mlen] == '\n' || p[mlen] == ' '))
        return 0;
    if (n + 1 >= outlen)
      return fail(s, err, errlen, "%s printed more than %zu bytes", what, outlen);
    ssize_t k = L.libssh2_channel_read_ex(s->chan, 0, out + n, outlen - 1 - n);
    if (k == LIBSSH2_ERROR_TIMEOUT) {
      /* Alive as far as SSH knows, but silent: stopped (SIGSTOP), hung,
       * or a host too loaded to run it. */
      fail(s, err, errlen, "%s did not answer within %.3g s (stopped, hung or starved of CPU?)",
           what, s->timeout_ms / 1e3);
      return SF__SSH_SILENT;
    }
    if (k < 0)
      return fail(s, err, errlen, "reading the output of %s failed: %s", what, lib_error(s));
    if (k == 0) {
      /* What the command said on stderr explains why it ended. */
      char why[256] = "";
      ssize_t e = L.libssh2_channel_read_ex(s->chan, 1, why, sizeof why - 1);
      why[e > 0 ? e : 0] = '\0';
      for (char *q = why; *q; q++)
        if (*q == '\n')
          *q = ' ';
      size_t wl = strlen(why);
      while (wl && why[wl - 1] == ' ')
        why[--wl] = '\0';
      char how[96];
      exit_of(s, how, sizeof how);
      fail(s, err, errlen, "%s ended early%s%s%s%s", what, how, why[0] ? " (" : "", why,
           why[0] ? ")" : "");
      return SF__SSH_ENDED;
    }
    n += (size_t)k;
    out[n] = '\0';
  }
}

int sf__ssh_send(sf__ssh *s, const void *stdin_data, size_t n, char *err, size_t errlen) {
  const char *p = stdin_data;
  while (n) {
    ssize_t k = L.libssh2_channel_write_ex(s->chan, 0, p, n);
    if (k <= 0)
      return fail(s, err, errlen, "cannot pass the secret to the worker: %s", lib_error(s));
    p += k;
    n -= (size_t)k;
  }
  return 0;
}

void sf__ssh_detach(sf__ssh *s) { L.libssh2_session_set_blocking(s->sess, 0); }

int sf__ssh_unlink(sf__ssh *s, const char *path, char *err, size_t errlen) {
  LIBSSH2_SFTP *sftp = L.libssh2_sftp_init(s->sess);
  if (!sftp)
    return fail(s, err, errlen, "cannot start SFTP: %s", lib_error(s));
  int rc = 0;
  uint64_t size;
  if (L.libssh2_sftp_unlink_ex(sftp, path, (unsigned)strlen(path)) &&
      remote_file_size(sftp, path, &size))
    rc = fail(s, err, errlen, "cannot remove %s: %s (SFTP error %lu)", path, lib_error(s),
              sftp_errno(sftp));
  L.libssh2_sftp_shutdown(sftp);
  return rc;
}

/* Copies buf to fd, starting each line with prefix. */
static void copy_prefixed(int fd, const char *prefix, const char *buf, size_t n, bool *mid) {
  size_t plen = strlen(prefix);
  while (n) {
    if (!*mid)
      sf__out_write(fd, prefix, plen); /* clear of the head's progress line */
    const char *nl = memchr(buf, '\n', n);
    size_t k = nl ? (size_t)(nl - buf) + 1 : n;
    sf__out_write(fd, buf, k);
    *mid = !nl;
    buf += k;
    n -= k;
  }
}

int sf__ssh_pump(sf__ssh *s, int fd, const char *prefix) {
  if (!s->chan)
    return 0;
  char buf[16384];
  for (int stream = 0; stream < 2; stream++)
    for (;;) {
      ssize_t k = L.libssh2_channel_read_ex(s->chan, stream, buf, sizeof buf);
      if (k <= 0)
        break;
      copy_prefixed(fd, prefix, buf, (size_t)k, &s->mid_line[stream]);
    }
  return L.libssh2_channel_eof(s->chan) ? 0 : 1;
}

/* Waits up to ms for the child to end; true when it has. */
static bool reaped(pid_t pid, int ms) {
  int st;
  for (int i = 0; i <= ms / 10; i++) {
    if (waitpid(pid, &st, WNOHANG) != 0)
      return true;
    struct timespec ts = {0, 10 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  return false;
}

/* The ProxyCommand, once its socket is closed: most commands (ssh -W, nc)
 * end by themselves at the end of their input; one that does not gets
 * SIGHUP, as from ssh, and then SIGKILL.  Waiting first spares the user
 * the "Killed by signal 1." an ssh -W prints on SIGHUP. */
static void end_proxy(pid_t pid) {
  if (reaped(pid, 500))
    return;
  kill(pid, SIGHUP);
  if (reaped(pid, 1000))
    return;
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
}

void sf__ssh_close(sf__ssh *s, bool abrupt) {
  if (!s)
    return;
  /* A lost node's channel never closes: cut the connection, so libssh2's
   * goodbyes fail at once instead of waiting out the timeout. */
  if (abrupt && s->fd >= 0)
    shutdown(s->fd, SHUT_RDWR);
  if (s->sess) {
    /* Bounded: libssh2_channel_close can wait forever for a peer that
     * never answers (libssh2 #232), so the session timeout applies. */
    L.libssh2_session_set_blocking(s->sess, 1);
    L.libssh2_session_set_timeout(s->sess, 2000);
    if (s->chan) {
      L.libssh2_channel_close(s->chan);
      L.libssh2_channel_free(s->chan);
    }
    L.libssh2_session_disconnect_ex(s->sess, SSH_DISCONNECT_BY_APPLICATION, "sflow run ended",
                                    "");
    L.libssh2_session_free(s->sess);
  }
  if (s->fd >= 0)
    close(s->fd);
  /* Our end closed, the tunnel's thread ends and closes the jump hosts. */
  if (s->pumping)
    pthread_join(s->pump, NULL);
  if (s->tunnel_fd >= 0)
    close(s->tunnel_fd);
  if (s->proxy_pid > 0)
    end_proxy(s->proxy_pid);
  free(s);
}
