/*
 * test_rt_hostfile.c — the --nodes host list: every rule of the hostfile
 * format (hosts, ports, slots, gpus, comments, blank lines) and every error,
 * each with the exact file:line message a user sees.
 */
#include "net.h"
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
  CHECK_INT(L.hosts[0].port, 22);
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

static void test_ports(void) {
  CHECK_INT(parse("a:2222\nb port=2200 slots=2\n[::1]:2201\n[fe80::1%eth0]\n"), 0);
  CHECK_INT(L.n, 4);
  CHECK_INT(L.hosts[0].port, 2222);
  CHECK_STR(L.hosts[0].name, "a");
  CHECK_INT(L.hosts[1].port, 2200);
  CHECK_STR(L.hosts[2].name, "::1");
  CHECK_INT(L.hosts[2].port, 2201);
  CHECK_STR(L.hosts[3].name, "fe80::1%eth0");
  CHECK_INT(L.hosts[3].port, 22);
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
  CHECK_INT(parse("localhost:2201\nlocalhost:2202\n"), 0);
  CHECK_INT(L.n, 2);
}

static void test_duplicate(void) {
  expect_error("a\nb\n\na\n", "hosts.txt:4: duplicate host 'a' port 22 (first on line 1)");
  expect_error("a:2222\na port=2222\n",
               "hosts.txt:2: duplicate host 'a' port 2222 (first on line 1)");
}

static void test_empty(void) {
  expect_error("", "hosts.txt: no hosts in hostfile");
  expect_error("# only a comment\n\n", "hosts.txt: no hosts in hostfile");
}

static void test_bad_numbers(void) {
  expect_error("a slots=0\n", "hosts.txt:1: invalid slots '0' (expected a number from 1)");
  expect_error("a\nb slots=x\n", "hosts.txt:2: invalid slots 'x' (expected a number from 1)");
  expect_error("a slots=\n", "hosts.txt:1: invalid slots '' (expected a number from 1)");
  expect_error("a gpus=-1\n", "hosts.txt:1: invalid gpus '-1' (expected a number from 0)");
  expect_error("a:0\n", "hosts.txt:1: invalid port '0' (expected 1 to 65535)");
  expect_error("a:70000\n", "hosts.txt:1: invalid port '70000' (expected 1 to 65535)");
  expect_error("a port=22x\n", "hosts.txt:1: invalid port '22x' (expected 1 to 65535)");
  expect_error("a slots=99999999999\n",
               "hosts.txt:1: invalid slots '99999999999' (expected a number from 1)");
}

static void test_bad_keys(void) {
  expect_error("a cpus=4\n",
               "hosts.txt:1: unknown key 'cpus' (expected slots, gpus, port or max_slots)");
  expect_error("a slots=1 slots=2\n", "hosts.txt:1: 'slots' given twice");
  expect_error("a b\n", "hosts.txt:1: unexpected 'b' (expected key=value: slots, gpus, port)");
  expect_error("a:2222 port=2223\n", "hosts.txt:1: port given both after ':' and as port=");
}

static void test_bad_names(void) {
  expect_error("a/b\n", "hosts.txt:1: invalid character '/' in host 'a/b'");
  expect_error(":22\n", "hosts.txt:1: empty host name in ':22'");
  expect_error("[::1\n", "hosts.txt:1: missing ']' in host '[::1'");
  expect_error("[::1]x\n", "hosts.txt:1: expected ':PORT' after ']' in '[::1]x'");
  CHECK_INT(parse("a\0b\n"), 0); /* strlen stops at the NUL: one host */
  CHECK_INT(sf__hostfile_parse("a\nb\0c\n", 6, "h", &L, err, sizeof err), -1);
  CHECK_STR(err, "h:2: NUL byte in hostfile");
}

static void test_list(void) {
  sf__hostlist_free(&L);
  CHECK_INT(sf__hostlist_parse("a,b:2222,[::1]:22", &L, err, sizeof err), 0);
  CHECK_INT(L.n, 3);
  CHECK_INT(L.hosts[1].port, 2222);
  CHECK_INT(L.hosts[2].line, 0);
  CHECK_STR(L.source, "--nodes");
  sf__hostlist_free(&L);
  CHECK_INT(sf__hostlist_parse("a,,b", &L, err, sizeof err), -1);
  CHECK_STR(err, "--nodes entry 2: empty host name");
  CHECK_INT(sf__hostlist_parse("a,a", &L, err, sizeof err), -1);
  CHECK_STR(err, "--nodes entry 2: duplicate host 'a' port 22");
}

static void test_from_arg(void) {
  char path[] = "/tmp/sflow_hosts_XXXXXX";
  int fd = mkstemp(path);
  const char *text = "# two nodes\nn1 slots=2\nn2:2200\n";
  CU_ASSERT(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
  close(fd);
  sf__hostlist_free(&L);
  CHECK_INT(sf__hosts_from_arg(path, &L, err, sizeof err), 0);
  CHECK_INT(L.n, 2);
  CHECK_INT(L.hosts[1].port, 2200);
  CHECK_STR(L.source, path);
  unlink(path);
  sf__hostlist_free(&L);
  /* Not a file and no '/': a host list. */
  CHECK_INT(sf__hosts_from_arg("h1,h2", &L, err, sizeof err), 0);
  CHECK_INT(L.n, 2);
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
      {"ports", test_ports},
      {"comments_blank_lines", test_comments_blank_lines},
      {"no_final_newline", test_no_final_newline},
      {"max_slots_accepted", test_max_slots_accepted},
      {"same_host_other_port", test_same_host_other_port},
      {"duplicate", test_duplicate},
      {"empty", test_empty},
      {"bad_numbers", test_bad_numbers},
      {"bad_keys", test_bad_keys},
      {"bad_names", test_bad_names},
      {"list", test_list},
      {"from_arg", test_from_arg},
      {NULL, NULL},
  };
  int r = rt_run("hostfile", tests, argc, argv);
  sf__hostlist_free(&L);
  return r;
}
