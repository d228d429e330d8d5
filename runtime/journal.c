/* journal.c — placeholder while the journal is written. */
#include "internal.h"
_Thread_local sf__capture *sf__capture_cur;
void sf__capture_line(const char *s, size_t n) { (void)s; (void)n; }
bool sf__capture_muted(void) { return false; }
sf__capture *sf__capture_begin(int mode) { (void)mode; return NULL; }
void sf__capture_end(sf__capture *prev) { (void)prev; }
int64_t sf__journal_next(void) { return -1; }
int64_t sf__spawn_id(void) { return -1; }
sf_future *sf__journal_task_replay(int64_t seq, const sf_task_desc *d, const sf_loc *loc) { return NULL; }
void sf__journal_task_done(int64_t seq, const sf_task_desc *d, void *res) {}
int sf__journal_call_mode(sf_actor *a, int64_t seq) { return SF__REPLAY_LIVE; }
void sf__journal_call_result(sf_actor *a, int64_t seq, const sf_method_desc *m, void *res) {}
void sf__journal_call_done(sf_actor *a, int64_t seq, const sf_method_desc *m, void *res) {}
int64_t sf__journal_route_any(int64_t seq, sf_actor **members, int64_t n, int64_t best) { return best; }
bool sf__journal_f64(double *v) { return false; }
void sf__journal_begin(const sf_program *prog, sf_value *args) {}
void sf__journal_end(void) {}
void sf__journal_flush(void) {}
bool sf__checkpoint_restore(sf_actor *a) { return false; }
void sf__checkpoint_maybe(sf_actor *a) {}
