/*
 * test_rt_sshconfig.c — ~/.ssh/config for --nodes hosts (sshconfig.c):
 * OpenSSH's matching (Host patterns with *, ? and !, Match all/host/
 * originalhost/user/localuser, first value wins, IdentityFile adding up,
 * Include with globs and its saved state), the syntax (Key=value, quotes,
 * case), the expansions (~, %h %u %d %r %p %n %%), what beats what
 * (hostfile, flags, config), and every error with its file:line.
 *
 * HOME is a fresh temporary folder, so ~ and Include paths are known.
 */
#include <pwd.h>
#include <sys/stat.h>

#include "cluster.h"
#include "rt_test.h"

static char home[256], err[1024], me[256];
static sf__sshcfg *C;
static sf__ssh_target T;
static sf__ssh_opts O;

static int parse(const char *text) {
  sf__sshcfg_free(C);
  C = NULL;
  err[0] = '\0';
  return sf__sshcfg_parse(text, strlen(text), "config", &C, err, sizeof err);
}

static void expect_parse_error(const char *text, const char *want) {
  CHECK_INT(parse(text), -1);
  CHECK_STR(err, want);
}

/* Resolves "[user@]name" with port (0: none) under the current config. */
static int resolve_port(const char *user, const char *name, int port) {
  sf__host h = {(char *)name, (char *)user, port, -1, -1, 1};
  err[0] = '\0';
  return sf__sshcfg_resolve(C, &h, &O, &T, err, sizeof err);
}

static int resolve(const char *name) { return resolve_port(NULL, name, 0); }

static void write_file(const char *rel, const char *text) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", home, rel);
  FILE *f = fopen(path, "w");
  CU_ASSERT_FATAL(f != NULL);
  fputs(text, f);
  fclose(f);
}

static void test_alias(void) {
  CHECK_INT(parse("Host gpu1\n"
                  "  HostName 127.0.0.3\n"
                  "  Port 2201\n"
                  "  User alice\n"
                  "  IdentityFile ~/.ssh/cluster_key\n"),
            0);
  CHECK_INT(resolve("gpu1"), 0);
  CHECK_STR(T.host, "127.0.0.3");
  CHECK_INT(T.port, 2201);
  CHECK_STR(T.user, "alice");
  CHECK_INT(T.nids, 1);
  char want[600];
  snprintf(want, sizeof want, "%s/.ssh/cluster_key", home);
  CHECK_STR(T.ids[0], want);
  CHECK_STR(T.name, "gpu1");
  CHECK_STR(T.label, "gpu1 (127.0.0.3 port 2201)");
  /* As OpenSSH: known_hosts is looked up under the HostName, with the port. */
  CHECK_STR(T.key_host, "127.0.0.3");
  CHECK_INT(T.key_port, 2201);
  snprintf(want, sizeof want, "%s/.ssh/known_hosts", home);
  CHECK_INT(T.nknown, 1);
  CHECK_STR(T.known[0], want);
  CU_ASSERT(!T.accept_new);
  /* Another host: nothing applies; the defaults. */
  CHECK_INT(resolve("gpu2"), 0);
  CHECK_STR(T.host, "gpu2");
  CHECK_INT(T.port, 22);
  CHECK_STR(T.user, me);
  CHECK_INT(T.nids, 3);
  snprintf(want, sizeof want, "%s/.ssh/id_ed25519", home);
  CHECK_STR(T.ids[0], want);
  CHECK_STR(T.label, "gpu2");
  CHECK_STR(T.key_host, "gpu2");
  CHECK_INT(T.key_port, 22);
}

static void test_patterns(void) {
  CHECK_INT(parse("Host *.lab !bastion.lab\n  Port 2001\n"
                  "Host node?  other\n  Port 2002\n"
                  "Host 10.0.*\n  Port 2003\n"
                  "Host *\n  Port 2999\n"),
            0);
  CHECK_INT(resolve("a.lab"), 0);
  CHECK_INT(T.port, 2001);
  CHECK_INT(resolve("bastion.lab"), 0); /* negated: the block does not apply */
  CHECK_INT(T.port, 2999);
  CHECK_INT(resolve("node7"), 0);
  CHECK_INT(T.port, 2002);
  CHECK_INT(resolve("node17"), 0); /* ? is exactly one character */
  CHECK_INT(T.port, 2999);
  CHECK_INT(resolve("other"), 0); /* the second pattern of the line */
  CHECK_INT(T.port, 2002);
  CHECK_INT(resolve("10.0.3.4"), 0);
  CHECK_INT(T.port, 2003);
  CHECK_INT(resolve("NODE1"), 0); /* host names compare without case */
  CHECK_INT(T.port, 2002);
  CHECK_STR(T.host, "node1"); /* ssh lower-cases the destination */
  /* A line with only negations matches nothing. */
  CHECK_INT(parse("Host !a\n  Port 2001\n"), 0);
  CHECK_INT(resolve("b"), 0);
  CHECK_INT(T.port, 22);
}

static void test_first_value_wins(void) {
  CHECK_INT(parse("Port 2000\n" /* before any Host: applies to every host */
                  "Host a\n  Port 2001\n  User first\n  IdentityFile /k/one\n"
                  "Host a b\n  User second\n  HostName %h.example.org\n"
                  "  IdentityFile /k/two\n"
                  "Host *\n  User third\n  IdentityFile /k/three\n  HostName ignored\n"),
            0);
  CHECK_INT(resolve("a"), 0);
  CHECK_INT(T.port, 2000);
  CHECK_STR(T.user, "first");
  CHECK_STR(T.host, "a.example.org");
  /* IdentityFile lines add up, in order. */
  CHECK_INT(T.nids, 3);
  CHECK_STR(T.ids[0], "/k/one");
  CHECK_STR(T.ids[1], "/k/two");
  CHECK_STR(T.ids[2], "/k/three");
  CHECK_INT(resolve("b"), 0);
  CHECK_STR(T.user, "second");
  CHECK_INT(T.nids, 2);
  CHECK_STR(T.ids[0], "/k/two");
  CHECK_INT(resolve("c"), 0);
  CHECK_STR(T.host, "ignored");
  CHECK_STR(T.label, "c (ignored port 2000)");
}

static void test_syntax(void) {
  CHECK_INT(parse("# a comment\n"
                  "\n"
                  "HOST=q1\n"
                  "\thostname = 10.1.1.1\r\n"
                  "  port=2022 # a comment after the value\n"
                  "  IDENTITYFILE \"/keys/with space/id\"\n"
                  "  identityfile '/keys/single'\n"
                  "  IdentityFile /keys/esc\\ aped\n"
                  "  User \"bob\"\n"
                  "  SomeFutureKeyword whatever \"x\n" /* unknown: ignored, even malformed */
                  "  ForwardAgent yes\n"),
            0);
  CHECK_INT(resolve("q1"), 0);
  CHECK_STR(T.host, "10.1.1.1");
  CHECK_INT(T.port, 2022);
  CHECK_STR(T.user, "bob");
  CHECK_INT(T.nids, 3);
  CHECK_STR(T.ids[0], "/keys/with space/id");
  CHECK_STR(T.ids[1], "/keys/single");
  CHECK_STR(T.ids[2], "/keys/esc aped");
  CHECK_STR(sf__sshcfg_warnings(C), "");
}

static void test_expansion(void) {
  CHECK_INT(parse("Host n1\n  HostName real-%h\n  User ruser\n  Port 2200\n"
                  "  IdentityFile ~/k/%h-%r-%p\n"
                  "  IdentityFile %d/k/%n_%u\n"
                  "  IdentityFile /k/100%%\n"
                  "  UserKnownHostsFile ~/kh/%k /etc/kh none\n"),
            0);
  CHECK_INT(resolve("n1"), 0);
  CHECK_STR(T.host, "real-n1");
  char want[600];
  snprintf(want, sizeof want, "%s/k/real-n1-ruser-2200", home);
  CHECK_STR(T.ids[0], want);
  snprintf(want, sizeof want, "%s/k/n1_%s", home, me);
  CHECK_STR(T.ids[1], want);
  CHECK_STR(T.ids[2], "/k/100%");
  CHECK_INT(T.nknown, 2); /* "none" adds no file */
  snprintf(want, sizeof want, "%s/kh/n1", home);
  CHECK_STR(T.known[0], want);
  CHECK_STR(T.known[1], "/etc/kh");
  /* ~user is that user's home. */
  struct passwd *pw = getpwuid(getuid());
  char text[512];
  snprintf(text, sizeof text, "IdentityFile ~%s/id\n", pw->pw_name);
  CHECK_INT(parse(text), 0);
  CHECK_INT(resolve("x"), 0);
  snprintf(want, sizeof want, "%s/id", pw->pw_dir);
  CHECK_STR(T.ids[0], want);
  /* Errors come when a host uses the line, naming it. */
  CHECK_INT(parse("Host y\n  IdentityFile ~/%C\n"), 0);
  CHECK_INT(resolve("x"), 0);
  CHECK_INT(resolve("y"), -1);
  CHECK_STR(err, "config:2: unsupported token %C in '~/%C' (sflow expands ~, %d %h %i %k %L "
                 "%l %n %p %r %u %%)");
  CHECK_INT(parse("IdentityFile ~no_such_user_sflow/id\n"), 0);
  CHECK_INT(resolve("x"), -1);
  CHECK_STR(err, "config:1: unknown user '~no_such_user_sflow' in ~no_such_user_sflow/id");
}

static void test_match(void) {
  CHECK_INT(parse("Host gpu*\n  HostName 10.9.0.%h\n"
                  "Match host 10.9.0.*\n  Port 2101\n" /* HostName so far, as ssh */
                  "Match originalhost db1,db2 !host skip*\n  Port 2102\n"
                  "Match user carol\n  Port 2103\n"
                  "Match !localuser nobody_sflow\n  IdentityFile /k/local\n"
                  "Match all\n  User everyone\n"),
            0);
  CHECK_INT(resolve("gpu1"), 0);
  CHECK_STR(T.host, "10.9.0.gpu1");
  CHECK_INT(T.port, 2101);
  CHECK_STR(T.user, "everyone");
  CHECK_INT(T.nids, 1);
  CHECK_STR(T.ids[0], "/k/local");
  CHECK_INT(resolve("db2"), 0);
  CHECK_INT(T.port, 2102);
  CHECK_INT(resolve_port("carol", "other", 0), 0);
  CHECK_INT(T.port, 2103);
  CHECK_STR(T.user, "carol");
  CHECK_INT(resolve("other"), 0);
  CHECK_INT(T.port, 22);
  CHECK_STR(sf__sshcfg_warnings(C), "");
  /* A criterion sflow cannot evaluate: that block is skipped, with one warning. */
  CHECK_INT(parse("Match exec \"test -f /x\" host a\n  Port 2201\n"
                  "Match localnetwork 10.0.0.0/8\n  Port 2202\n"
                  "Match canonical host a\n  Port 2204\n" /* no final pass: never */
                  "Host a\n  Port 2203\n"),
            0);
  CHECK_INT(resolve("a"), 0);
  CHECK_INT(T.port, 2203);
  CHECK_STR(sf__sshcfg_warnings(C),
            "config:1: Match exec is not supported by sflow; this Match block is skipped\n"
            "config:3: Match localnetwork is not supported by sflow; this Match block is "
            "skipped\n");
}

/* Match final (RHEL's ssh_config.d/50-redhat.conf has one): ssh reads the
 * files twice, final true the second time, and only fills what is unset. */
static void test_match_final(void) {
  CHECK_INT(parse("Match final all\n  Port 2000\n  IdentityFile /k/final\n"
                  "Host a\n  Port 3000\n  IdentityFile /k/a\n"
                  "Match !final host b\n  User first-pass\n"
                  "Match canonical host b\n  User canonical\n  HostName b-canon\n"),
            0);
  CHECK_INT(resolve("a"), 0);
  CHECK_INT(T.port, 3000);
  CHECK_INT(T.nids, 2); /* /k/a once, though both passes meet it */
  CHECK_STR(T.ids[0], "/k/a");
  CHECK_STR(T.ids[1], "/k/final");
  CHECK_INT(resolve("b"), 0);
  CHECK_INT(T.port, 2000);
  CHECK_STR(T.user, "first-pass");
  CHECK_STR(T.host, "b-canon");
  CHECK_STR(sf__sshcfg_warnings(C), "");
  expect_parse_error("Match host a all\n",
                     "config:1: Match all cannot be combined with other criteria");
}

static void test_include(void) {
  write_file(".ssh/conf.d/10-gpus.conf", "Host gpu*\n  Port 2301\n  User incl\n");
  write_file(".ssh/conf.d/20-all.conf", "Port 2302\nIdentityFile /k/from-include\n");
  write_file(".ssh/conf.d/README", "Port 9999\n"); /* not matched by the glob */
  write_file(".ssh/other.conf", "Host *\n  User late\n");
  /* An Include inside a Host block applies only to that block's hosts,
   * and the state of the including block comes back after it. */
  CHECK_INT(parse("Host gpu1 cpu1\n"
                  "  Include conf.d/*.conf\n"
                  "  HostName inside-%h\n"
                  "Host db\n"
                  "  Include ~/.ssh/other.conf\n"
                  "Host *\n"
                  "  Include conf.d/nothing-*.conf\n" /* matches nothing: fine */
                  "  User last\n"),
            0);
  CHECK_INT(resolve("gpu1"), 0);
  CHECK_INT(T.port, 2301);
  CHECK_STR(T.user, "incl");
  /* Each included file starts in the including block's state (so 20-all's
   * lines apply to both hosts), and HostName after the Include belongs to
   * "Host gpu1 cpu1" again, not to the included "Host gpu*". */
  CHECK_STR(T.host, "inside-gpu1");
  CHECK_INT(T.nids, 1);
  CHECK_STR(T.ids[0], "/k/from-include");
  CHECK_INT(resolve("cpu1"), 0);
  CHECK_INT(T.port, 2302);
  CHECK_STR(T.user, "last");
  CHECK_STR(T.host, "inside-cpu1");
  CHECK_INT(resolve("db"), 0);
  CHECK_STR(T.user, "late");
  CHECK_INT(resolve("zz"), 0); /* an Include in a block that does not match adds nothing */
  CHECK_STR(T.user, "last");
  CHECK_INT(T.port, 22);
  /* Lines before any Host in an included file follow the including block. */
  write_file(".ssh/flat.conf", "Port 2401\n");
  CHECK_INT(parse("Host a\n  Include flat.conf\n"), 0);
  CHECK_INT(resolve("a"), 0);
  CHECK_INT(T.port, 2401);
  CHECK_INT(resolve("b"), 0);
  CHECK_INT(T.port, 22);
  /* Errors in an included file name that file; a loop is bounded. */
  write_file(".ssh/bad.conf", "\nPort x\n");
  CHECK_INT(parse("Include bad.conf\n"), -1);
  char want[600];
  snprintf(want, sizeof want, "%s/.ssh/bad.conf:2: invalid Port 'x' (expected 1 to 65535)",
           home);
  CHECK_STR(err, want);
  write_file(".ssh/loop.conf", "Include loop.conf\n");
  CHECK_INT(parse("Include loop.conf\n"), -1);
  snprintf(want, sizeof want, "%s/.ssh/loop.conf:1: Include nested more than 16 deep", home);
  CHECK_STR(err, want);
}

static void test_precedence(void) {
  CHECK_INT(parse("Host *\n  User cfguser\n  Port 2500\n  IdentityFile /k/cfg\n"
                  "  UserKnownHostsFile /kh/cfg\n  StrictHostKeyChecking yes\n"),
            0);
  CHECK_INT(resolve("h"), 0);
  CHECK_STR(T.user, "cfguser");
  CHECK_INT(T.port, 2500);
  CU_ASSERT(!T.accept_new);
  /* The hostfile's user@ and port beat the config. */
  CHECK_INT(resolve_port("filer", "h", 2600), 0);
  CHECK_STR(T.user, "filer");
  CHECK_INT(T.port, 2600);
  CHECK_STR(T.name, "[h]:2600");
  CHECK_STR(T.label, "[h]:2600");
  CHECK_STR(T.key_host, "h");
  CHECK_INT(T.key_port, 2600);
  /* The flags beat the config; the hostfile's user beats --ssh-user. */
  O = (sf__ssh_opts){.user = "flaguser", .key = "/k/flag", .known_hosts = "/kh/flag",
                     .accept_new = true};
  CHECK_INT(resolve("h"), 0);
  CHECK_STR(T.user, "flaguser");
  CHECK_INT(T.nids, 1);
  CHECK_STR(T.ids[0], "/k/flag");
  CU_ASSERT(T.ids_from_flag);
  CHECK_INT(T.nknown, 1);
  CHECK_STR(T.known[0], "/kh/flag");
  CU_ASSERT(T.accept_new);
  CHECK_INT(resolve_port("filer", "h", 0), 0);
  CHECK_STR(T.user, "filer");
  O = (sf__ssh_opts){0};
  CHECK_INT(resolve("h"), 0);
  CU_ASSERT(!T.ids_from_flag);
  CHECK_STR(T.ids[0], "/k/cfg");
  CHECK_STR(T.known[0], "/kh/cfg");
}

static void test_host_keys(void) {
  /* accept-new, and no/off read as accept-new: never weaker than that. */
  static const char *const values[] = {"accept-new", "no", "off", "yes", "ask", "Accept-New"};
  static const bool accept[] = {true, true, true, false, false, true};
  for (int i = 0; i < 6; i++) {
    char text[128];
    snprintf(text, sizeof text, "StrictHostKeyChecking %s\n", values[i]);
    CHECK_INT(parse(text), 0);
    CHECK_INT(resolve("h"), 0);
    CHECK_INT(T.accept_new, accept[i]);
  }
  CHECK_INT(parse("Host h\n  HostName 10.0.0.9\n  Port 2222\n  HostKeyAlias cluster-h\n"), 0);
  CHECK_INT(resolve("h"), 0);
  CHECK_STR(T.key_host, "cluster-h");
  CHECK_INT(T.key_port, -1);
  CHECK_INT(parse("Host h\n  IdentitiesOnly yes\n"), 0);
  CHECK_INT(resolve("h"), 0);
  CU_ASSERT(T.identities_only);
}

static void test_labels_and_warnings(void) {
  CHECK_INT(parse("Host j\n  ProxyJump bastion\nHost k\n  ProxyCommand none\n"
                  "Host p\n  Port 2000\n"),
            0);
  CHECK_INT(resolve("j"), 0);
  CHECK_STR(T.warning, "");
  CHECK_STR(T.label, "j (via bastion)");
  sf__ssh_target_free(&T);
  CHECK_INT(resolve("k"), 0);
  CHECK_STR(T.warning, "");
  CU_ASSERT(!T.jump && !T.proxy_command[0]);
  CHECK_INT(resolve("p"), 0);
  CHECK_STR(T.label, "p (port 2000)");
  CHECK_INT(resolve("::1"), 0);
  CHECK_STR(T.name, "[::1]");
  CHECK_STR(T.host, "::1");
  CHECK_INT(resolve_port(NULL, "::1", 2222), 0);
  CHECK_STR(T.name, "[::1]:2222");
}

/* ProxyJump as ssh -J: the first hop through its own config, the later
 * ones only through the hop before; ProxyCommand's tokens expanded. */
static void test_proxies(void) {
  CHECK_INT(parse("Host t1\n  HostName 10.1.0.9\n  Port 2201\n  User bob\n"
                  "  ProxyJump carol@b2:2022,[::1]:23\n"
                  "Host b2\n  HostName 192.0.2.7\n  ProxyJump outer\n"
                  "Host ::1\n  ProxyJump ignored-for-a-later-hop\n"
                  "Host outer\n  User olga\n"
                  "Host pc\n  ProxyCommand ssh -W '%h:%p' -l %r \"%n\" %% \n"
                  "Host * \n  ProxyJump outer\n"),
            0);
  CHECK_INT(resolve("t1"), 0);
  CHECK_STR(T.label, "t1 (10.1.0.9 port 2201 via [::1]:23)");
  CU_ASSERT_FATAL(T.jump != NULL);
  CHECK_STR(T.jump->name, "[::1]:23");
  CHECK_STR(T.jump->user, me); /* not the destination's User */
  CU_ASSERT_FATAL(T.jump->jump != NULL);
  const sf__ssh_target *b2 = T.jump->jump;
  CHECK_STR(b2->host, "192.0.2.7");
  CHECK_STR(b2->user, "carol");
  CHECK_INT(b2->port, 2022);
  CU_ASSERT_FATAL(b2->jump != NULL); /* the first hop's own ProxyJump */
  CHECK_STR(b2->jump->name, "outer");
  CHECK_STR(b2->jump->user, "olga");
  CU_ASSERT(b2->jump->jump == NULL); /* Host * ProxyJump outer: not through itself */
  sf__ssh_target_free(&T);
  CHECK_INT(resolve_port("eve", "pc", 2200), 0);
  CHECK_STR(T.proxy_command, "ssh -W 'pc:2200' -l eve \"pc\" %");
  CU_ASSERT(T.jump == NULL);
  CHECK_STR(T.label, "[pc]:2200 (via ProxyCommand)");
  expect_parse_error("Host a\n  ProxyJump\n", "config:2: ProxyJump needs an argument");
  CHECK_INT(parse("Host a\n  ProxyJump x:0\nHost b\n  ProxyCommand nc %z\n"
                  "Host c\n  ProxyJump c2\nHost c2\n  ProxyJump c3\nHost c3\n  ProxyJump c2\n"),
            0);
  CHECK_INT(resolve("a"), -1);
  CHECK_STR(err, "config:2: invalid port '0' in ProxyJump (expected 1 to 65535)");
  CHECK_INT(resolve("b"), -1);
  CHECK_STR(err, "config:4: unsupported token %z in ProxyCommand (ssh expands %h %n %p %r %% "
                 "there)");
  CHECK_INT(resolve("c"), -1);
  CU_ASSERT(strstr(err, "more than 8 jump hosts") != NULL);
}

static void test_errors(void) {
  expect_parse_error("Host a\n  Port 0\n", "config:2: invalid Port '0' (expected 1 to 65535)");
  expect_parse_error("Port 22x\n", "config:1: invalid Port '22x' (expected 1 to 65535)");
  expect_parse_error("Port\n", "config:1: Port needs an argument");
  expect_parse_error("Host\n", "config:1: Host needs an argument");
  expect_parse_error("HostName a b\n", "config:1: HostName takes one argument, not 2");
  expect_parse_error("User \"bob\n", "config:1: unterminated quote in User");
  expect_parse_error("StrictHostKeyChecking maybe\n",
                     "config:1: invalid StrictHostKeyChecking 'maybe' (expected yes, ask, "
                     "accept-new, no or off)");
  expect_parse_error("IdentitiesOnly sure\n",
                     "config:1: invalid IdentitiesOnly 'sure' (expected yes or no)");
  expect_parse_error("Match host\n", "config:1: Match host needs an argument");
  expect_parse_error("Match all host a\n",
                     "config:1: Match all cannot be combined with other criteria");
  /* A bad value is an error even in a block no host uses, as in ssh. */
  expect_parse_error("Host nothing-matches-this\n\n  Port 99999\n",
                     "config:3: invalid Port '99999' (expected 1 to 65535)");
  CHECK_INT(sf__sshcfg_parse("Port 1\0x", 8, "config", &C, err, sizeof err), -1);
  CHECK_STR(err, "config:1: NUL byte in ssh config");
  C = NULL;
}

static void test_load(void) {
  sf__sshcfg *c = NULL;
  /* The default: ~/.ssh/config (here HOME's), then the system file. */
  write_file(".ssh/config", "Host viahome\n  Port 2700\n");
  CHECK_INT(sf__sshcfg_load(NULL, &c, err, sizeof err), 0);
  sf__host h = {"viahome", NULL, 0, -1, -1, 1};
  CHECK_INT(sf__sshcfg_resolve(c, &h, &O, &T, err, sizeof err), 0);
  CHECK_INT(T.port, 2700);
  sf__sshcfg_free(c);
  /* none: nothing at all (ssh -F none). */
  CHECK_INT(sf__sshcfg_load("none", &c, err, sizeof err), 0);
  CHECK_INT(sf__sshcfg_resolve(c, &h, &O, &T, err, sizeof err), 0);
  CHECK_INT(T.port, 22);
  sf__sshcfg_free(c);
  /* A named file replaces both defaults and must exist. */
  write_file("mine.conf", "Host viahome\n  Port 2701\n");
  char path[512];
  snprintf(path, sizeof path, "%s/mine.conf", home);
  CHECK_INT(sf__sshcfg_load(path, &c, err, sizeof err), 0);
  CHECK_INT(sf__sshcfg_resolve(c, &h, &O, &T, err, sizeof err), 0);
  CHECK_INT(T.port, 2701);
  sf__sshcfg_free(c);
  CHECK_INT(sf__sshcfg_load("/no/such/ssh_config", &c, err, sizeof err), -1);
  CHECK_STR(err, "cannot read ssh config /no/such/ssh_config: No such file or directory");
  CU_ASSERT(c == NULL);
  /* No config at all (NULL) is the same as an empty one. */
  CHECK_INT(sf__sshcfg_resolve(NULL, &h, &O, &T, err, sizeof err), 0);
  CHECK_INT(T.port, 22);
  unlink(path);
  snprintf(path, sizeof path, "%s/.ssh/config", home);
  unlink(path);
}

int main(int argc, char **argv) {
  snprintf(home, sizeof home, "/tmp/sflow_sshcfg_XXXXXX");
  if (!mkdtemp(home))
    return 1;
  char d[512];
  snprintf(d, sizeof d, "%s/.ssh", home);
  mkdir(d, 0700);
  snprintf(d, sizeof d, "%s/.ssh/conf.d", home);
  mkdir(d, 0700);
  setenv("HOME", home, 1);
  struct passwd *pw = getpwuid(getuid());
  snprintf(me, sizeof me, "%s", pw ? pw->pw_name : "");
  static const rt_test tests[] = {
      {"alias", test_alias},
      {"patterns", test_patterns},
      {"first_value_wins", test_first_value_wins},
      {"syntax", test_syntax},
      {"expansion", test_expansion},
      {"match", test_match},
      {"match_final", test_match_final},
      {"include", test_include},
      {"precedence", test_precedence},
      {"host_keys", test_host_keys},
      {"labels_and_warnings", test_labels_and_warnings},
      {"proxies", test_proxies},
      {"errors", test_errors},
      {"load", test_load},
      {NULL, NULL},
  };
  int r = rt_run("sshconfig", tests, argc, argv);
  sf__sshcfg_free(C);
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", home);
  if (system(cmd)) {
  }
  return r;
}
