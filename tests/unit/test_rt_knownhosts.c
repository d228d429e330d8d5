/*
 * test_rt_knownhosts.c — known_hosts matching (runtime/knownhosts.c) by
 * OpenSSH's rules: a bare host is port 22 only and [host]:port only that
 * port; @revoked refuses a key for every host even when another line
 * lists it, naming the line; @cert-authority lines are skipped for plain
 * keys; hashed names (made by ssh-keygen -H) match the same [host]:port
 * form; patterns with *, ? and !, comma-separated lists; a key of another
 * type is not a change; malformed lines are skipped; HMAC-SHA1 and base64
 * against known vectors; the line recorded on first use reads back.
 */
#include "cluster.h"
#include "rt_test.h"

/* Two ed25519 keys and an ECDSA key made with ssh-keygen for this test. */
#define K1 "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIL0EaD/z8TgqT8wNJpmoxk2C7ZL4XIpWL0WCL/YADldG"
#define K2 "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIF4bKiNU9svGU3eKaSaatZ6cg+kVcxne/7naB2ElyMc1"
#define K3                                                                                    \
  "ecdsa-sha2-nistp256 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABBBJsnryMD6+MjoRe4Q" \
  "DiPfbx1YdrmPKjajmz19s7XGHSIbW48FvdZtgrccpWt0rpavLnkAMlIkd92tAQM/rUCiF4="

typedef struct key {
  uint8_t b[512];
  size_t n;
} key;

static key blob(const char *line) {
  key k = {{0}, 0};
  const char *sp = strchr(line, ' ');
  long n = sf__base64_decode(sp + 1, strlen(sp + 1), k.b, sizeof k.b);
  CU_ASSERT_FATAL(n > 0);
  k.n = (size_t)n;
  return k;
}

/* The verdict of text for host:port and key; where gets "file:line". */
static sf__kh_status check(const char *text, const char *host, int port, const char *keyline,
                           char *where) {
  char name[300];
  sf__kh_name(host, port, name, sizeof name);
  key k = blob(keyline);
  sf__kh_result r = {0};
  sf__kh_check(text, strlen(text), "kh", name, k.b, k.n, &r);
  if (where)
    strcpy(where, r.status ? r.where : "");
  return r.status;
}

static void test_ports(void) {
  const char *bare = "node4 " K1 "\n";
  CHECK_INT(check(bare, "node4", 22, K1, NULL), SF__KH_MATCH);
  CHECK_INT(check(bare, "node4", 2222, K1, NULL), SF__KH_NOTFOUND); /* port 22 only */
  CHECK_INT(check(bare, "node4", 2222, K2, NULL), SF__KH_NOTFOUND); /* not a change either */
  const char *bracket = "[node4]:2222 " K1 "\n";
  CHECK_INT(check(bracket, "node4", 2222, K1, NULL), SF__KH_MATCH);
  CHECK_INT(check(bracket, "node4", 22, K1, NULL), SF__KH_NOTFOUND);
  CHECK_INT(check(bracket, "node4", 2223, K1, NULL), SF__KH_NOTFOUND);
  CHECK_INT(check(bracket, "node4", 2222, K2, NULL), SF__KH_MISMATCH);
  /* [host]:22 is how ssh never writes port 22, so it names nothing. */
  CHECK_INT(check("[node4]:22 " K1 "\n", "node4", 22, K1, NULL), SF__KH_NOTFOUND);
  /* A HostKeyAlias is looked up without a port. */
  char name[64];
  sf__kh_name("alias", -1, name, sizeof name);
  CHECK_STR(name, "alias");
  sf__kh_name("10.0.0.1", 2201, name, sizeof name);
  CHECK_STR(name, "[10.0.0.1]:2201");
}

static void test_revoked(void) {
  char where[600];
  /* Revoked for every host, whatever its patterns, even where a later
   * line lists the key for this host. */
  const char *text = "# cluster\n"
                     "@revoked otherhost " K1 "\n"
                     "[node4]:2222 " K1 "\n";
  CHECK_INT(check(text, "node4", 2222, K1, where), SF__KH_REVOKED);
  CHECK_STR(where, "kh:2");
  const char *before = "[node4]:2222 " K1 "\n@revoked * " K1 "\n";
  CHECK_INT(check(before, "node4", 2222, K1, where), SF__KH_REVOKED);
  CHECK_STR(where, "kh:2");
  /* Another key of the host is unaffected. */
  CHECK_INT(check("@revoked * " K2 "\n[node4]:2222 " K1 "\n", "node4", 2222, K1, NULL),
            SF__KH_MATCH);
}

static void test_cert_authority(void) {
  /* A CA key says nothing about plain host keys: not a match, and not a
   * change when the host shows another key. */
  const char *ca = "@cert-authority *.cluster " K1 "\n";
  CHECK_INT(check(ca, "a.cluster", 22, K1, NULL), SF__KH_NOTFOUND);
  CHECK_INT(check(ca, "a.cluster", 22, K2, NULL), SF__KH_NOTFOUND);
  CHECK_INT(check("@unknown-marker node " K1 "\n", "node", 22, K1, NULL), SF__KH_NOTFOUND);
}

static void test_hashed(void) {
  /* ssh-keygen -H of "[127.0.0.2]:2222 K1" and "gpu7 K1". */
  const char *text =
      "|1|XChatQ1C9OjDo/d+PJ/T6IDgVLc=|+ifbvpCDtxM8qvUV1V+h6jTO4+0= " K1 "\n"
      "|1|hFU3zWEj1I5Xh6h2R5wSgrm4RhQ=|TMsmdvx0s64VmWrXQFeCbmdS2hI= " K1 "\n";
  char where[600];
  CHECK_INT(check(text, "127.0.0.2", 2222, K1, where), SF__KH_MATCH);
  CHECK_STR(where, "kh:1");
  CHECK_INT(check(text, "gpu7", 22, K1, where), SF__KH_MATCH);
  CHECK_STR(where, "kh:2");
  CHECK_INT(check(text, "127.0.0.2", 22, K1, NULL), SF__KH_NOTFOUND);
  CHECK_INT(check(text, "gpu7", 2222, K1, NULL), SF__KH_NOTFOUND);
  CHECK_INT(check(text, "GPU8", 22, K1, NULL), SF__KH_NOTFOUND);
  CHECK_INT(check(text, "gpu7", 22, K2, NULL), SF__KH_MISMATCH);
  /* A damaged hash or salt matches nothing (and does not crash). */
  CHECK_INT(check("|1|XChat|+ifbvpCDtxM8qvUV1V+h6jTO4+0= " K1 "\n", "127.0.0.2", 2222, K1, NULL),
            SF__KH_NOTFOUND);
  CHECK_INT(check("|1|XChatQ1C9OjDo/d+PJ/T6IDgVLc= " K1 "\n", "127.0.0.2", 2222, K1, NULL),
            SF__KH_NOTFOUND);
  CHECK_INT(check("|1|!!|x " K1 "\n", "x", 22, K1, NULL), SF__KH_NOTFOUND);
}

static void test_patterns(void) {
  const char *text = "gpu*,!gpu9,db?.lab," "[10.0.0.*]:2201 " K1 "\n";
  CHECK_INT(check(text, "gpu1", 22, K1, NULL), SF__KH_MATCH);
  CHECK_INT(check(text, "GPU12", 22, K1, NULL), SF__KH_MATCH); /* without case */
  CHECK_INT(check(text, "gpu9", 22, K1, NULL), SF__KH_NOTFOUND); /* negated */
  CHECK_INT(check(text, "gpu9", 22, K2, NULL), SF__KH_NOTFOUND);
  CHECK_INT(check(text, "db1.lab", 22, K1, NULL), SF__KH_MATCH);
  CHECK_INT(check(text, "db12.lab", 22, K1, NULL), SF__KH_NOTFOUND);
  CHECK_INT(check(text, "10.0.0.7", 2201, K1, NULL), SF__KH_MATCH);
  CHECK_INT(check(text, "10.0.0.7", 22, K1, NULL), SF__KH_NOTFOUND);
  /* The pattern sees the whole name, brackets and port, as in ssh: gpu*
   * does not match [gpu1]:2222, while * does. */
  CHECK_INT(check(text, "gpu1", 2222, K1, NULL), SF__KH_NOTFOUND);
  CHECK_INT(check("* " K1 "\n", "gpu1", 2222, K1, NULL), SF__KH_MATCH);
  /* Comma-separated names, the way ssh writes "host,ip". */
  const char *pair = "node4,10.1.2.3 " K1 "\n";
  CHECK_INT(check(pair, "10.1.2.3", 22, K1, NULL), SF__KH_MATCH);
  CHECK_INT(check(pair, "node4", 22, K1, NULL), SF__KH_MATCH);
  CHECK_INT(check(pair, "node", 22, K1, NULL), SF__KH_NOTFOUND);
}

static void test_types_and_precedence(void) {
  char where[600];
  /* The host's ECDSA key is listed; its ed25519 key is unknown, not changed. */
  const char *text = "node " K3 "\n";
  CHECK_INT(check(text, "node", 22, K1, NULL), SF__KH_NOTFOUND);
  /* Two ed25519 keys listed, one of them right: accepted. */
  const char *two = "node " K2 "\nnode " K1 "\n";
  CHECK_INT(check(two, "node", 22, K1, where), SF__KH_MATCH);
  CHECK_STR(where, "kh:2");
  CHECK_INT(check("node " K2 "\n", "node", 22, K1, where), SF__KH_MISMATCH);
  CHECK_STR(where, "kh:1");
  /* Types listed for the host, for the algorithm preference. */
  sf__kh_result r = {0};
  const char *mixed = "node " K3 "\nnode " K1 "\nnode " K2 "\nother ssh-rsa AAAAB3NzaC1yc2E=\n";
  sf__kh_check(mixed, strlen(mixed), "kh", "node", NULL, 0, &r);
  CHECK_STR(r.types, "ecdsa-sha2-nistp256,ssh-ed25519");
  CHECK_INT(r.status, SF__KH_NOTFOUND);
}

static void test_malformed_lines(void) {
  const char *text = "\n   \n# comment " K1 "\n"
                     "node\n"
                     "node ssh-ed25519\n"
                     "node ssh-ed25519 !!!notbase64\n"
                     "node ssh-ed25519 AAAA\n"
                     "@revoked\n"
                     "\tnode " K1 " trailing comment\r\n";
  char where[600];
  CHECK_INT(check(text, "node", 22, K1, where), SF__KH_MATCH);
  CHECK_STR(where, "kh:9");
}

static void test_files(void) {
  char dir[] = "/tmp/sflow-kh-XXXXXX";
  CU_ASSERT_FATAL(mkdtemp(dir) != NULL);
  char a[256], b[256], err[512];
  snprintf(a, sizeof a, "%s/a", dir);
  snprintf(b, sizeof b, "%s/b", dir);
  FILE *f = fopen(a, "w");
  fputs("[node]:2222 " K1 "\n", f);
  fclose(f);
  f = fopen(b, "w");
  fputs("# second file\n@revoked * " K1 "\n", f);
  fclose(f);
  key k = blob(K1);
  sf__kh_result r = {0};
  CHECK_INT(sf__kh_check_file(a, "[node]:2222", k.b, k.n, &r, err, sizeof err), 0);
  CHECK_INT(r.status, SF__KH_MATCH);
  CHECK_INT(sf__kh_check_file(b, "[node]:2222", k.b, k.n, &r, err, sizeof err), 0);
  CHECK_INT(r.status, SF__KH_REVOKED);
  char want[300];
  snprintf(want, sizeof want, "%s:2", b);
  CHECK_STR(r.where, want);
  char missing[300];
  snprintf(missing, sizeof missing, "%s/none", dir);
  CHECK_INT(sf__kh_check_file(missing, "node", k.b, k.n, &r, err, sizeof err), 0);
  /* A folder is not a known_hosts file. */
  sf__kh_result r2 = {0};
  CHECK_INT(sf__kh_check_file(dir, "node", k.b, k.n, &r2, err, sizeof err), -1);
  CU_ASSERT(strstr(err, "cannot read known hosts file") != NULL);
  /* The line recorded on first use reads back as a match. */
  char line[1024];
  CHECK_INT(sf__kh_line("[node]:2222", k.b, k.n, line, sizeof line), 0);
  CHECK_STR(line, "[node]:2222 " K1 "\n");
  remove(a);
  remove(b);
  rmdir(dir);
}

static void test_vectors(void) {
  /* HMAC-SHA1 (RFC 2202 case 2, and a longer message). */
  uint8_t mac[20];
  char hex[41];
  sf__hmac_sha1((const uint8_t *)"Jefe", 4, "what do ya want for nothing?", 28, mac);
  sf__hex(mac, 20, hex);
  CHECK_STR(hex, "effcdf6ae5eb2fa2d27416d5f184df9c259a7c79");
  uint8_t longkey[80];
  memset(longkey, 0xaa, sizeof longkey);
  sf__hmac_sha1(longkey, 80, "Test Using Larger Than Block-Size Key - Hash Key First", 54, mac);
  sf__hex(mac, 20, hex);
  CHECK_STR(hex, "aa4ae5e15272d00e95705637ce8a3b55ed402112"); /* RFC 2202 case 6 */
  char enc[64];
  sf__base64_encode((const uint8_t *)"sflow", 5, enc);
  CHECK_STR(enc, "c2Zsb3c=");
  uint8_t out[8];
  CHECK_INT(sf__base64_decode("c2Zsb3c=", 8, out, sizeof out), 5);
  CU_ASSERT(memcmp(out, "sflow", 5) == 0);
  CHECK_INT(sf__base64_decode("c2Zsb3c", 7, out, sizeof out), 5);
  CHECK_INT(sf__base64_decode("c2Z*", 4, out, sizeof out), -1);
  CHECK_INT(sf__base64_decode("c2Zsb3c=", 8, out, 4), -1);
}

int main(int argc, char **argv) {
  static const rt_test tests[] = {
      {"ports", test_ports},
      {"revoked", test_revoked},
      {"cert_authority", test_cert_authority},
      {"hashed", test_hashed},
      {"patterns", test_patterns},
      {"types_and_precedence", test_types_and_precedence},
      {"malformed_lines", test_malformed_lines},
      {"files", test_files},
      {"vectors", test_vectors},
      {NULL, NULL},
  };
  return rt_run("knownhosts", tests, argc, argv);
}
