/*
 * test_rt_hostfile.c — the --nodes host list: every rule of the hostfile
 * format (hosts, user@host, host:N slots as in MPICH, [host]:PORT and
 * port=PORT, slots, gpus, comments, blank lines) and every error, each with
 * the exact file:line message a user sees.
 */
#include "cluster.h"
#include "rt_test.h"

static sf__hostlist L;
static char err[512];

static int parse(const char *text) {
  sf__hostlist_free(&L);
  err[0] = '\0';
  return sf__hostfile_parse(text, strlen(text), "hosts.txt", &L, err, sizeof err);
}

static void expect_error(const char *text, const char *want) {
  CHECK_INT(parse(text), -1);
  CHECK_STR(err, want);
  CHECK_INT(L.n, 0);
}

static void test_plain_hosts(void) {
  CHECK_INT(parse("node1\nnode2\n"), 0);
  CHECK_INT(L.n, 2);
  CHECK_STR(L.hosts[0].name, "node1");
  CU_ASSERT(L.hosts[0].user == NULL);
  CHECK_INT(L.hosts[0].port, 0); /* not given: ~/.ssh/config's Port, else 22 */
  CHECK_INT(L.hosts[0].slots, -1);
  CHECK_INT(L.hosts[0].gpus, -1);
  CHECK_INT(L.hosts[1].line, 2);
  CHECK_STR(L.source, "hosts.txt");
}

static void test_slots_gpus(void) {
  CHECK_INT(parse("a slots=8 gpus=4\nb gpus=0 slots=1\n"), 0);
  CHECK_INT(L.hosts[0].slots, 8);
  CHECK_INT(L.hosts[0].gpus, 4);
  CHECK_INT(L.hosts[1].slots, 1);
  CHECK_INT(L.hosts[1].gpus, 0);
}

/* MPICH hostfiles and mpirun -H: host:N is N slots, never a port. */
static void test_colon_slots(void) {
  CHECK_INT(parse("node2:4\nnode3:1024 gpus=1\n127.0.0.5:1\n"), 0);
  CHECK_INT(L.n, 3);
  CHECK_STR(L.hosts[0].name, "node2");
  CHECK_INT(L.hosts[0].slots, 4);
  CHECK_INT(L.hosts[0].port, 0);
  CHECK_INT(L.hosts[1].slots, 1024);
  CHECK_INT(L.hosts[1].gpus, 1);
  CHECK_INT(L.hosts[1].port, 0);
  CHECK_STR(L.hosts[2].name, "127.0.0.5");
  CHECK_INT(L.hosts[2].slots, 1);
}

static void test_ports(void) {
  CHECK_INT(parse("[a]:2222\nb port=2200 slots=2\n[::1]:2201\n[fe80::1%eth0]\n"
                  "[10.0.0.1]:2202 slots=3\n"),
            0);
  CHECK_INT(L.n, 5);
  CHECK_INT(L.hosts[0].port, 2222);
  CHECK_STR(L.hosts[0].name, "a");
  CHECK_INT(L.hosts[0].slots, -1);
  CHECK_INT(L.hosts[1].port, 2200);
  CHECK_STR(L.hosts[2].name, "::1");
  CHECK_INT(L.hosts[2].port, 2201);
  CHECK_STR(L.hosts[3].name, "fe80::1%eth0");
  CHECK_INT(L.hosts[3].port, 0);
  CHECK_STR(L.hosts[4].name, "10.0.0.1");
  CHECK_INT(L.hosts[4].port, 2202);
  CHECK_INT(L.hosts[4].slots, 3);
}

static void test_users(void) {
  CHECK_INT(parse("alice@node1\nbob@node2:4\ncarol@[::1]:2222\nd.e-f_1@g port=2200 slots=2\n"
                  "ad@corp@node5\n"),
            0);
  CHECK_INT(L.n, 5);
  CHECK_STR(L.hosts[0].user, "alice");
  CHECK_STR(L.hosts[0].name, "node1");
  CHECK_STR(L.hosts[1].user, "bob");
  CHECK_STR(L.hosts[1].name, "node2");
  CHECK_INT(L.hosts[1].slots, 4);
  CHECK_STR(L.hosts[2].user, "carol");
  CHECK_STR(L.hosts[2].name, "::1");
  CHECK_INT(L.hosts[2].port, 2222);
  CHECK_STR(L.hosts[3].user, "d.e-f_1");
  CHECK_INT(L.hosts[3].port, 2200);
  /* As OpenSSH: the host follows the last '@' (user names with a domain). */
  CHECK_STR(L.hosts[4].user, "ad@corp");
  CHECK_STR(L.hosts[4].name, "node5");
}

static void test_comments_blank_lines(void) {
  CHECK_INT(parse("# cluster\n\n   \t\na slots=2 # the big one\r\n  # indented comment\nb#c\n"), 0);
  CHECK_INT(L.n, 2);
  CHECK_STR(L.hosts[1].name, "b");
  CHECK_INT(L.hosts[0].line, 4);
  CHECK_INT(L.hosts[1].line, 6);
}

static void test_no_final_newline(void) {
  CHECK_INT(parse("a\nb"), 0);
  CHECK_INT(L.n, 2);
}

static void test_max_slots_accepted(void) {
  CHECK_INT(parse("a slots=2 max_slots=4\nb max-slots=3\n"), 0);
  CHECK_INT(L.n, 2);
}

static void test_same_host_other_port(void) {
  /* How tests simulate a cluster on one machine. */
  CHECK_INT(parse("[localhost]:2201\nlocalhost port=2202\nlocalhost\n"), 0);
  CHECK_INT(L.n, 3);
}

static void test_duplicate(void) {
  expect_error("a\nb\n\na\n", "hosts.txt:4: duplicate host 'a' (first on line 1)");
  expect_error("[a]:2222\na port=2222\n",
               "hosts.txt:2: duplicate host 'a' port 2222 (first on line 1)");
  /* The slots or the user do not make it another node. */
  expect_error("a:2\nu@a:3\n", "hosts.txt:2: duplicate host 'a' (first on line 1)");
  expect_error("a\na port=22\n", "hosts.txt:2: duplicate host 'a' port 22 (first on line 1)");
}

static void test_empty(void) {
  expect_error("", "hosts.txt: no hosts in hostfile");
  expect_error("# only a comment\n\n", "hosts.txt: no hosts in hostfile");
}

static void test_bad_numbers(void) {
  expect_error("a slots=0\n", "hosts.txt:1: invalid slots '0' (expected a number from 1 to 1024)");
  expect_error("a\nb slots=x\n", "hosts.txt:2: invalid slots 'x' (expected a number from 1 to 1024)");
  expect_error("a slots=\n", "hosts.txt:1: invalid slots '' (expected a number from 1 to 1024)");
  expect_error("a gpus=-1\n", "hosts.txt:1: invalid gpus '-1' (expected a number from 0)");
  expect_error("[a]:0\n", "hosts.txt:1: invalid port '0' (expected 1 to 65535)");
  expect_error("[a]:70000\n", "hosts.txt:1: invalid port '70000' (expected 1 to 65535)");
  expect_error("[a]:\n", "hosts.txt:1: invalid port '' (expected 1 to 65535)");
  expect_error("a port=22x\n", "hosts.txt:1: invalid port '22x' (expected 1 to 65535)");
  expect_error("a slots=99999999999\n",
               "hosts.txt:1: invalid slots '99999999999' (expected a number from 1 to 1024)");
}

static void test_bad_colon_slots(void) {
  static const char hint[] =
      " (host:N is N slots, as in MPICH; an SSH port is [host]:PORT or port=PORT)";
  char want[256];
  /* An older sflow's host:PORT: more slots than a worker may run. */
  snprintf(want, sizeof want, "hosts.txt:1: invalid slots '2222' in 'node3:2222' (1 to 1024)%s",
           hint);
  expect_error("node3:2222\n", want);
  snprintf(want, sizeof want, "hosts.txt:1: invalid slots '0' in 'a:0' (1 to 1024)%s", hint);
  expect_error("a:0\n", want);
  snprintf(want, sizeof want, "hosts.txt:1: invalid slots 'ssh' in 'a:ssh' (1 to 1024)%s", hint);
  expect_error("a:ssh\n", want);
  snprintf(want, sizeof want, "hosts.txt:1: invalid slots '' in 'u@a:' (1 to 1024)%s", hint);
  expect_error("u@a:\n", want);
  snprintf(want, sizeof want, "hosts.txt:2: invalid slots '99999999999' in 'b:99999999999' (1 to 1024)%s",
           hint);
  expect_error("a\nb:99999999999\n", want);
  expect_error("fe80::1\n",
               "hosts.txt:1: IPv6 address 'fe80::1' must be in brackets: [fe80::1]");
  expect_error("a:2:3\n", "hosts.txt:1: IPv6 address 'a:2:3' must be in brackets: [a:2:3]");
}

static void test_bad_keys(void) {
  expect_error("a cpus=4\n",
               "hosts.txt:1: unknown key 'cpus' (expected slots, gpus, port or max_slots)");
  expect_error("a slots=1 slots=2\n", "hosts.txt:1: 'slots' given twice");
  /* max-slots is max_slots spelt another way: the same key twice. */
  expect_error("a max-slots=2 max_slots=3\n", "hosts.txt:1: 'max_slots' given twice");
  expect_error("a max_slots=0\n", "hosts.txt:1: invalid max_slots '0' (expected a number from 1)");
  expect_error("a b\n", "hosts.txt:1: unexpected 'b' (expected key=value: slots, gpus, port)");
  expect_error("[a]:2222 port=2223\n",
               "hosts.txt:1: port given both as [host]:PORT and as port=");
  /* host:N and slots=M say the same thing twice: refused even when equal. */
  expect_error("a:2 slots=4\n", "hosts.txt:1: slots given both as host:N and as slots=");
  expect_error("a:2 slots=2\n", "hosts.txt:1: slots given both as host:N and as slots=");
}

static void test_bad_names(void) {
  expect_error("a/b\n", "hosts.txt:1: invalid character '/' in host 'a/b'");
  expect_error(":22\n", "hosts.txt:1: empty host name in ':22'");
  expect_error("[::1\n", "hosts.txt:1: missing ']' in host '[::1'");
  expect_error("[::1]x\n", "hosts.txt:1: expected ':PORT' after ']' in '[::1]x'");
  expect_error("[]:22\n", "hosts.txt:1: empty host name in '[]:22'");
  CHECK_INT(parse("a\0b\n"), 0); /* strlen stops at the NUL: one host */
  sf__hostlist_free(&L);
  CHECK_INT(sf__hostfile_parse("a\nb\0c\n", 6, "h", &L, err, sizeof err), -1);
  CHECK_STR(err, "h:2: NUL byte in hostfile");
}

static void test_bad_users(void) {
  expect_error("@a\n", "hosts.txt:1: empty user name in '@a'");
  expect_error("u@\n", "hosts.txt:1: empty host name in 'u@'");
  expect_error("u@:4\n", "hosts.txt:1: empty host name in 'u@:4'");
  expect_error("a'b@c\n", "hosts.txt:1: invalid character ''' in user 'a'b' of 'a'b@c'");
  expect_error("-oProxyCommand=x@c\n",
               "hosts.txt:1: user '-oProxyCommand=x' of '-oProxyCommand=x@c' starts with '-'");
  expect_error("-a\n", "hosts.txt:1: host '-a' starts with '-'");
}

static void test_list(void) {
  sf__hostlist_free(&L);
  CHECK_INT(sf__hostlist_parse("a,b:2,[::1]:22,u@c,[d]:2222,v@e:3", &L, err, sizeof err), 0);
  CHECK_INT(L.n, 6);
  CHECK_INT(L.hosts[1].slots, 2);
  CHECK_INT(L.hosts[1].port, 0);
  CHECK_INT(L.hosts[2].port, 22);
  CHECK_INT(L.hosts[2].line, 0);
  CHECK_STR(L.hosts[3].user, "u");
  CHECK_STR(L.hosts[3].name, "c");
  CHECK_INT(L.hosts[4].port, 2222);
  CHECK_STR(L.hosts[5].user, "v");
  CHECK_INT(L.hosts[5].slots, 3);
  CHECK_STR(L.source, "--nodes");
  sf__hostlist_free(&L);
  CHECK_INT(sf__hostlist_parse("a,,b", &L, err, sizeof err), -1);
  CHECK_STR(err, "--nodes entry 2: empty host name");
  CHECK_INT(sf__hostlist_parse("a,a", &L, err, sizeof err), -1);
  CHECK_STR(err, "--nodes entry 2: duplicate host 'a'");
  CHECK_INT(sf__hostlist_parse("a,b:x", &L, err, sizeof err), -1);
  CHECK_STR(err, "--nodes entry 2: invalid slots 'x' in 'b:x' (1 to 1024) (host:N is N slots, as in MPICH; "
                 "an SSH port is [host]:PORT or port=PORT)");
}

static void test_from_arg(void) {
  char path[] = "/tmp/sflow_hosts_XXXXXX";
  int fd = mkstemp(path);
  const char *text = "# two nodes\nn1 slots=2\nn2:4\n";
  CU_ASSERT(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
  close(fd);
  sf__hostlist_free(&L);
  CHECK_INT(sf__hosts_from_arg(path, &L, err, sizeof err), 0);
  CHECK_INT(L.n, 2);
  CHECK_INT(L.hosts[1].slots, 4);
  CHECK_INT(L.hosts[1].port, 0);
  CHECK_STR(L.source, path);
  unlink(path);
  sf__hostlist_free(&L);
  /* Not a file and no '/': a host list. */
  CHECK_INT(sf__hosts_from_arg("h1,u@h2:2", &L, err, sizeof err), 0);
  CHECK_INT(L.n, 2);
  CHECK_INT(L.hosts[1].slots, 2);
  sf__hostlist_free(&L);
  CHECK_INT(sf__hosts_from_arg("/no/such/hosts.txt", &L, err, sizeof err), -1);
  CHECK_STR(err, "cannot read hostfile '/no/such/hosts.txt': No such file or directory");
  CHECK_INT(sf__hosts_from_arg("missing.txt", &L, err, sizeof err), -1);
  CHECK_STR(err, "cannot read hostfile 'missing.txt': No such file or directory");
}

int main(int argc, char **argv) {
  static const rt_test tests[] = {
      {"plain_hosts", test_plain_hosts},
      {"slots_gpus", test_slots_gpus},
      {"colon_slots", test_colon_slots},
      {"ports", test_ports},
      {"users", test_users},
      {"comments_blank_lines", test_comments_blank_lines},
      {"no_final_newline", test_no_final_newline},
      {"max_slots_accepted", test_max_slots_accepted},
      {"same_host_other_port", test_same_host_other_port},
      {"duplicate", test_duplicate},
      {"empty", test_empty},
      {"bad_numbers", test_bad_numbers},
      {"bad_colon_slots", test_bad_colon_slots},
      {"bad_keys", test_bad_keys},
      {"bad_names", test_bad_names},
      {"bad_users", test_bad_users},
      {"list", test_list},
      {"from_arg", test_from_arg},
      {NULL, NULL},
  };
  int r = rt_run("hostfile", tests, argc, argv);
  sf__hostlist_free(&L);
  return r;
}
