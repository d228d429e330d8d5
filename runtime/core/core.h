/*
 * core.h — the core layer's internal names (prefix `sf__`): memory, type
 * descriptors, strings, arrays, printing, errors, serialization, SHA-256,
 * the builtins' random streams and the command-line flags.  Generated code
 * never sees this header; it calls only what sflow.h declares.
 *
 * Key design choice: the runtime is seven layers, one folder and one header
 * each (docs/architecture.md, "Runtime layers"): core, sched (includes
 * core.h), durable and gpu (include sched.h), cluster (includes durable.h
 * and gpu.h), data (std.data's formats; includes core.h only) and nn
 * (tensors; includes gpu.h and data.h).  A file includes its own layer's header and so sees the
 * layers below, never one above; where a lower layer must reach a higher
 * one, the lower one owns a hook (a function pointer set once at start-up,
 * before any thread) that the higher one installs.  This header has a
 * section per core file, in the order a program meets them.
 *
 * Conventions every file follows:
 *  - A NULL sf_str* means the empty string and a NULL sf_array* means an
 *    empty array: zero-filled memory (a fresh str[] array, an actor field
 *    before init) must be a valid value, never a crash.
 *  - Arguments are borrowed; results documented "owned" carry +1.
 */
#ifndef SF_CORE_H
#define SF_CORE_H

#include <limits.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "flagnames.h"
#include "sflow.h"

#define SF__VERSION "0.1.0"

/* ------------------------------------------------------------ mem.c */

/* Destructors for futures, actors, groups and tensors, filled in by the
 * files that implement them (tensors: the nn layer, runtime/nn/).  A
 * destructor frees the object itself; with no destructor registered the
 * object's memory is simply freed. */
typedef void (*sf__dtor_fn)(sf_obj *obj);
extern sf__dtor_fn sf__obj_dtor[SF_OBJ_TENSOR + 1];

/* sf_alloc for count * size bytes, with the multiplication checked. */
void *sf__alloc_n(size_t count, size_t size);
/* realloc of an sf_alloc block that never returns NULL (out of memory is a
 * runtime error). */
void *sf__realloc(void *p, size_t n);

/* Blocks of up to SF__BLOCK_MAX bytes recycled through per-thread caches
 * (futures with their task records: a million-task run allocates and frees
 * a million of them).  sf__block_alloc returns the block and its class,
 * which sf__block_free needs back; a larger size is plain sf_alloc, class
 * -1. */
#define SF__BLOCK_MAX 512
void *sf__block_alloc(size_t n, int32_t *cls);
void sf__block_free(void *p, int32_t cls);

/* ------------------------------------------------------------ str.c */

/* Bytes and length of a string, treating NULL as "". */
static inline const char *sf__str_data(const sf_str *s) { return s ? s->data : ""; }
static inline int64_t sf__str_len(const sf_str *s) { return s ? s->len : 0; }
/* hdr.flags of a string in a block of the per-thread caches: the bit, or'd
 * with the block's class.  Frees a string either way. */
#define SF__STR_BLOCK 0x100
void sf__str_free(sf_str *s);
/* A new string of len bytes (owned) for the caller to fill; the NUL after
 * them is set.  len 0 gives a fresh empty string, not the shared one. */
sf_str *sf__str_alloc(int64_t len);

/* ----------------------------------------------------------- text.c */

/* Bytes of the well-formed UTF-8 sequence at s[0..n), or 0 when s starts
 * an ill-formed one (overlong, surrogate, past U+10FFFF, truncated); *bad
 * is then the length of its maximal subpart, the bytes one U+FFFD stands
 * for (Unicode's "substitution of maximal subparts").  n >= 1. */
size_t sf__utf8_seq(const unsigned char *s, size_t n, size_t *bad);

/* Python repr() of a double / float into buf (NUL-terminated, returns the
 * length).  SF__FLOAT_BUF bytes always suffice. */
#define SF__FLOAT_BUF 32
int sf__fmt_f64_repr(double v, char *buf);
int sf__fmt_f32_repr(float v, char *buf);

/* Strict number parsing shared by casts and command-line flags.  The whole
 * of [s, s+len) must be the number; no surrounding whitespace. */
typedef enum { SF__PARSE_OK = 0, SF__PARSE_BAD, SF__PARSE_RANGE } sf__parse_status;
sf__parse_status sf__parse_i64(const char *s, size_t len, int64_t *out);
sf__parse_status sf__parse_i32(const char *s, size_t len, int32_t *out);
sf__parse_status sf__parse_f64(const char *s, size_t len, double *out);
sf__parse_status sf__parse_f32(const char *s, size_t len, float *out);
sf__parse_status sf__parse_bool(const char *s, size_t len, bool *out);

/* Writes s as a double-quoted sflow string literal (escapes for \" \\ and
 * control bytes) into buf of size n, cutting it to at most max_bytes of
 * content followed by "..." so error messages stay one readable line. */
void sf__quote(const char *s, size_t len, size_t max_bytes, char *buf, size_t n);
/* Appends s as a quoted literal, whole, to a print buffer (see print.c). */
struct sf__buf;
void sf__buf_put_quoted(struct sf__buf *b, const char *s, size_t len);

/* ---------------------------------------------------------- types.c */

/* True when a value of type t holds references that need retain/release. */
bool sf__type_has_refs(const sf_type *t);
/* The interned descriptor of "array of elem" (valid for the whole run).
 * Descriptors are compared by structure, never by pointer: the compiler
 * emits its own copies of the same types. */
const sf_type *sf__array_type(const sf_type *elem);
/* The interned descriptor of map<key, val> (key: str, i64, i32 or bool),
 * for runtime code that builds a map to return (sf_map_new needs one). */
const sf_type *sf__map_type(const sf_type *key, const sf_type *val);
/* The address of field `name` of the struct of type t at base, checked to
 * be of kind `kind` (an sf_kind; for SF_ARRAY, any element type).  For the
 * C side of @extern functions, which fill struct results by field name
 * from the descriptor they are given instead of mirroring the sflow struct
 * in C: a field missing or of another kind is a mismatch between a std
 * module and the runtime, reported at loc as such. */
void *sf__field(const sf_type *t, void *base, const char *name, int kind, const sf_loc *loc);

/* ---------------------------------------------------------- array.c */

/* Index helper: pointer to element i (no bounds check). */
static inline void *sf__array_at(const sf_array *a, int64_t i) {
  return (char *)a->data + i * (int64_t)a->elem->size;
}

/* Which copy of an array is current (sf_array.where): the GPU layer keeps
 * a device copy beside the host one (gpu.c). */
enum { SF__WHERE_HOST = 0, SF__WHERE_BOTH = 1, SF__WHERE_DEVICE = 2 };
/* Hooks the GPU layer installs (sf__gpu_install), the only maker of device
 * copies: freeing an array's device copy (mem.c, when a->dev is set), and
 * copying it back when it is the only current one (sf_array_host, before
 * the host reads the data: serial.c, collectives). */
extern void (*sf__array_dev_free)(sf_array *a);
extern void (*sf__array_to_host)(sf_array *a);
/* An array of len elements left unwritten, for a maker that writes every
 * element itself (no zero fill: a fresh block's pages are touched once,
 * by the writes, not twice).  elem must hold no references. */
sf_array *sf__array_new_uninit(const sf_type *elem, int64_t len, const sf_loc *loc);

/* fn(ctx, lo, hi) over [0, n) split over the pool's threads, the caller
 * taking part, when the sched layer is there (it installs sf__par_hook:
 * sf__parallel_for); else one call fn(ctx, 0, n) on the caller.  For the
 * layers below sched (data: CSV, encode_batch).  A runtime error in a
 * chunk is raised on the caller. */
extern void (*sf__par_hook)(int64_t n, int64_t grain, void (*fn)(void *ctx, int64_t lo, int64_t hi),
                            void *ctx);
void sf__par_for(int64_t n, int64_t grain, void (*fn)(void *ctx, int64_t lo, int64_t hi), void *ctx);
int32_t sf__par_threads(void); /* threads sf__par_for may use: 1 without the hook */
extern int32_t (*sf__par_threads_hook)(void);

/* ------------------------------------------------------------ map.c */

/* The table behind sf_map (map.c has the layout's rationale).  Entries are
 * {u64 hash, 8-byte key, value}, `stride` bytes each, in insertion order;
 * a removed one has hash 0.  index[] holds entry numbers, -1 empty, -2
 * removed, and has mask + 1 slots (a power of two, at least 2 * cap). */
struct sf_map {
  sf_obj hdr;
  int64_t len;          /* live entries */
  const sf_type *type;  /* SF_MAP: key fields[0].type, value elem */
  int64_t used, cap;    /* entries written (live and removed), room */
  char *entries;
  int32_t *index;
  uint64_t mask;
  int32_t stride;
};
/* Walks the live entries in order: *pos starts at 0; gives each key's and
 * value's bytes until it returns false. */
bool sf__map_next(const sf_map *m, int64_t *pos, const void **key, void **val);
void sf__map_destroy(sf_map *m); /* the last reference went */
/* The function-value table of the running program (sf_program.fn_names),
 * set by main before anything runs: printing names a function value, and
 * a value read back from bytes is checked against nfns. */
extern int64_t sf__nfns;
extern const char *const *sf__fn_names;
/* sf_program.fn_tasks: the task a function value names, or NULL. */
extern const sf_task_desc *const *sf__fn_tasks;
/* sf_program.fns: the function a value names, to call from C (std.nn's
 * custom backward). */
extern const void *const *sf__fns;

/* ---------------------------------------------------------- print.c */

/* Appends the printed form of a value of type t at p to a growing buffer;
 * `nested` quotes strings (inside arrays and structs). */
typedef struct sf__buf {
  char *data;
  size_t len, cap;
  char *inline_data; /* the caller's fixed storage (may be NULL), not freed */
  size_t inline_cap;
} sf__buf;
void sf__buf_init(sf__buf *b, char *storage, size_t cap);
/* Makes room for n more bytes (doubling); the slow path of sf__buf_put. */
void sf__buf_grow(sf__buf *b, size_t n);
/* Inline: journal records and serialized values are many small puts, and a
 * call per put was a tenth of the cost of a journaled empty task. */
static inline void sf__buf_put(sf__buf *b, const char *s, size_t n) {
  if (n > b->cap - b->len)
    sf__buf_grow(b, n);
  if (n)
    memcpy(b->data + b->len, s, n);
  b->len += n;
}
void sf__buf_free(sf__buf *b);
/* Appends printf-formatted text, whatever its length (the Prometheus
 * writers of sched/metrics.c and serve/metrics.c). */
void sf__buf_printf(sf__buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* s[0..n) as a JSON string literal, quotes included: '"' and '\\' escaped,
 * \n \r \t short, other control bytes and DEL as \u00XX, well-formed
 * UTF-8 passed through and each ill-formed subpart as \ufffd, so the
 * result is always valid JSON (trace files, metrics, error bodies,
 * safetensors headers, std.data's encoder). */
void sf__buf_json_str(sf__buf *b, const char *s, size_t n);
void sf__format_value(sf__buf *b, const sf_type *t, const void *p, bool nested);
/* write(2) all of buf to fd, retrying on EINTR and partial writes. */
bool sf__write_all(int fd, const char *buf, size_t n);
/* Every file sflow writes by path (outfile.c; the rules in docs/runtime.md,
 * "Files sflow writes"): nothing or a regular file is replaced whole (a
 * temporary file beside it, fsync, rename), a symlink is followed, a FIFO
 * or a character device is written in place and never replaced. */
enum { SF__OUT_ATOMIC = 1 /* only a whole replacement: refuse a FIFO or a device */ };
typedef struct sf__outfile {
  int fd;                  /* where the bytes go */
  char tmp[PATH_MAX + 64]; /* the temporary file renamed to dest, or "" (in place) */
  char dest[PATH_MAX];
} sf__outfile;
/* Opens o for path; false with errno set and why[] saying what is wrong
 * ("its folder does not exist", "it is a directory"). */
bool sf__outfile_open(sf__outfile *o, const char *path, int flags, char *why, size_t n);
bool sf__outfile_write(sf__outfile *o, const void *data, size_t n);
/* Flushes, fsyncs and renames into place; false with errno set (nothing
 * replaced).  Either commit or abort ends every opened o. */
bool sf__outfile_commit(sf__outfile *o);
void sf__outfile_abort(sf__outfile *o); /* the temporary file removed */
/* All of data[0..n) to path by those rules; false with why[] set. */
bool sf__write_file(const char *path, const void *data, size_t n, int flags, char *why,
                    size_t wn);
/* When set (a worker of a --nodes run), sf_print_end hands each finished
 * line (with its newline) here instead of writing fd 1. */
extern void (*sf__print_hook)(const char *line, size_t n);
/* Set while a restarted actor replays a call whose result the head already
 * delivered: its lines were printed the first time (ractor_head.c). */
extern _Thread_local bool sf__print_mute;
/* When set, sf_print_end also appends each line it prints (or hands to
 * the hook) here: the output of one attempt of a --nodes task (task.c),
 * which travels with its result so the head can journal it. */
extern _Thread_local sf__buf *sf__print_keep;

/* The output sink stack (print.c): the journal (durable/) keeps each
 * journaled call's lines with its record, and a replay mutes them. */
enum { SF__CAPTURE_OFF = 0, SF__CAPTURE_KEEP, SF__CAPTURE_MUTE };
/* The sink of one journaled call's print lines, on its runner's stack:
 * begin pushes it on this thread's stack (OFF pushes nothing: the lines
 * belong to the enclosing call), end pops it, out gives the lines it
 * kept (KEEP only) until free. */
typedef struct sf__capture sf__capture;
struct sf__capture {
  int mode;
  bool pushed;
  sf__buf buf;
  sf__capture *prev;
};
extern _Thread_local sf__capture *sf__capture_cur; /* sf_print_end appends here */
/* Whether begin pushes anything: set by the journal (journal.c) when the
 * run is journaled, before any thread. */
extern bool sf__capture_on;
void sf__capture_line(const char *s, size_t n);
bool sf__capture_muted(void);                      /* a replay prints nothing */
void sf__capture_begin(sf__capture *c, int mode);
void sf__capture_end(sf__capture *c);
const char *sf__capture_out(const sf__capture *c, size_t *n);
void sf__capture_free(sf__capture *c); /* ends it too */
/* Every write print.c makes to stdout: sf__write_all, or the progress
 * line's sf__out_write (installed by sf__sched_install), which keeps the
 * line out of the way. */
extern bool (*sf__out_writer)(int fd, const char *buf, size_t n);

/* ---------------------------------------------------------- error.c */

/* How a task attempt catches runtime errors instead of ending the program:
 * set sf__error_jmp (and optionally sf__error_handler) on the task's thread
 * before running it.  On an error the runtime formats the full message
 * ("file:line:col: runtime error: ...") into sf__error_message, calls the
 * handler if any, then longjmps to *sf__error_jmp with value 1.  With no jmp
 * set the message goes to stderr and the process exits with code 70. */
#define SF__ERROR_MAX 1024
#define SF__EXIT_RUNTIME 70
#define SF__EXIT_USAGE 2
typedef void (*sf__error_fn)(const char *message);
extern _Thread_local sf__error_fn sf__error_handler;
extern _Thread_local jmp_buf *sf__error_jmp;
/* sf_frames when *sf__error_jmp was set: before the longjmp the frames
 * above it are unwound, their locals released (sf__frames_unwind).  A
 * catch saves, sets and restores it with sf__error_jmp. */
extern _Thread_local sf_frame *sf__error_frames;
/* Pops the frames above mark off sf_frames, releasing their locals. */
void sf__frames_unwind(sf_frame *mark);
extern _Thread_local char sf__error_message[SF__ERROR_MAX];
/* Retry count of the task attempt running on this thread (sf_attempt). */
extern _Thread_local int64_t sf__attempt;
/* Raises an already formatted message ("file:l:c: runtime error: ..."),
 * e.g. one caught on another thread. */
_Noreturn void sf__raise_message(const char *message);
/* Called before a runtime error is written to stderr (sf__sched_install:
 * the progress line is cleared first); NULL: nothing. */
extern void (*sf__before_stderr)(void);

/* ------------------------------------------------------------- io.c */

/* All of fd (to EOF, retrying EINTR) in a new NUL-terminated buffer of
 * *len bytes (sf_free it); NULL with errno set on a read error. */
char *sf__read_fd(int fd, size_t *len);
/* The builtins are ABI (sflow.h).  std.io's @extern functions (the C form
 * of each sflow type: docs/language.md, "Standard-library externs"): */
void sf_std_io_stat(void *out, const sf_type *out_type, sf_str *path, const sf_loc *loc);
sf_array *sf_std_io_list_dir(sf_str *path, const sf_loc *loc);
sf_str *sf_std_io_resolve(sf_str *path, const sf_loc *loc);
/* The absolute folder of the program's source file, where io.resolve
 * looks second (sf_program.source_dir; main.c sets it, "" or NULL when
 * unknown). */
extern const char *sf__source_dir;
/* The generic ones: io.save<T>(path, value) and io.load<T>(path) -> T,
 * any value in the serializer's form (serial.c) behind a header naming
 * its type ("sflow value 1\nmap<str, i64>\n"). */
void sf_std_io_save(sf_str *path, const void *value, const sf_type *T, const sf_type *T_again, const sf_loc *loc);
void sf_std_io_load(void *out, const sf_type *T, sf_str *path, const sf_type *T_again, const sf_loc *loc);

/* ---------------------------------------------------------- serial.c */

/* Values to bytes and back, driven by type descriptors: used by
 * checkpoints, the journal and (later) the network. */
void sf__ser_value(sf__buf *b, const sf_type *t, const void *p);
/* Reads one value of type t into p (owned); false on malformed input. */
typedef struct sf__reader {
  const unsigned char *p, *end;
} sf__reader;
bool sf__de_value(sf__reader *r, const sf_type *t, void *p);
bool sf__de_u64(sf__reader *r, uint64_t *v);
void sf__ser_u64(sf__buf *b, uint64_t v);
/* Gives the value at p (of type t) its own copy of every tensor in it,
 * keeping the sharing inside it (serialized and read back): a task call or
 * an actor message on this node then gets what it would get on another,
 * so two concurrent calls never accumulate gradients into one param.  A
 * no-op for values without tensors. */
void sf__value_detach(const sf_type *t, void *p);
/* Set by the nn layer when it makes its first tensor: until then no value
 * can hold one, and sf__value_detach, on every task call, returns at once. */
extern bool sf__tensor_made;
uint32_t sf__crc32c(uint32_t crc, const void *data, size_t n);

/* Tensors (SF_TENSOR) belong to the nn layer above, which installs these
 * hooks in sf__nn_install() before any thread; core only calls them, so a
 * tensor crosses tasks, checkpoints, the journal and --nodes like any
 * value.  Core writes one byte before each tensor, 0 for NULL (a field
 * never assigned) and 1 for a tensor, so the hooks never see NULL: ser
 * appends the tensor's bytes (shape and f32 data), de reads them back into
 * a new owned tensor (false on malformed input), format appends its
 * printed form (print.c: `tensor([[1.0, 2.0], [3.0, 4.0]])`).  With the
 * hooks unset no tensor can exist, so reading one back fails. */
extern void (*sf__tensor_ser)(sf__buf *b, const void *tensor);
extern bool (*sf__tensor_de)(sf__reader *r, void **out);
extern void (*sf__tensor_format)(sf__buf *b, const void *tensor);

/* --------------------------------------------------------- sha256.c */

/* SHA-256 in one call, or streamed: init, update any number of times,
 * final.  crypto.c builds HMAC-SHA256 and file hashing on it. */
typedef struct {
  uint32_t h[8];
  uint64_t bytes;   /* hashed so far */
  uint8_t buf[64];  /* a partial block */
  size_t used;
} sf__sha256_ctx;
void sf__sha256_init(sf__sha256_ctx *c);
void sf__sha256_update(sf__sha256_ctx *c, const void *data, size_t n);
void sf__sha256_final(sf__sha256_ctx *c, uint8_t out[32]);
void sf__sha256(const void *data, size_t n, uint8_t out[32]);
void sf__sha256_hex(const void *data, size_t n, char out[65]);

/* -------------------------------------------------------- builtins.c */

extern int64_t sf__node_id; /* 0 on the head, k on the k-th --nodes host */
/* The value tap of now() (clock true) and the random draws
 * (sf__durable_install): on main, a live value is recorded, or on --resume
 * replaced by the recorded one (and now()'s live values after the replay
 * go on from the last replayed one).  NULL: the live value. */
extern double (*sf__value_tap)(double live, bool clock);

/* The random stream of the call running on this thread (main, a task
 * attempt, an actor message): its identity, the count of calls and spawns
 * it made (the next child's index) and its PCG32 state, made from the key
 * at the first draw.  Whoever runs a call saves the thread's, sets a fresh
 * one with the call's key (sf__rng_enter) and restores it after. */
typedef struct sf__rng {
  uint64_t key, children;
  uint64_t state, inc;
  bool live;
} sf__rng;
extern _Thread_local sf__rng sf__rng_cur;
/* std.nn's no_grad switch (ops record no autograd tape while it is on).
 * Core holds it, like the random stream, so the scheduler can start every
 * task call and actor method with it off and restore the caller's after:
 * one task that leaves it on must not silence the next on that thread. */
extern _Thread_local bool sf__no_grad;
/* std.nn's autocast switch (matmul and Linear in bf16 with f32
 * accumulation), held and reset exactly like no_grad. */
extern _Thread_local bool sf__autocast;
/* std.nn's nn.checkpoint: > 0 while a checkpointed function's forward
 * runs on this thread, when no_grad(false) leaves recording off (custom.c);
 * held and reset per call exactly like no_grad. */
extern _Thread_local int32_t sf__nn_ckpt_depth;
uint64_t sf__rng_mix(uint64_t key, uint64_t index); /* the key of child `index` of key */
/* The key of the next task call or spawn the running call makes. */
static inline uint64_t sf__rng_child(void) {
  return sf__rng_mix(sf__rng_cur.key, sf__rng_cur.children++);
}
static inline sf__rng sf__rng_enter(uint64_t key) {
  sf__rng saved = sf__rng_cur;
  sf__rng_cur = (sf__rng){.key = key};
  return saved;
}
/* Worker: a line "sflow worker K: ..." on stderr (it reaches the head's). */
void sf__worker_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ----------------------------------------------------------- flags.c */

/* --progress's values, in the order of its row's "auto|always|never"
 * (flagnames.h): the parser stores the index (unit/test_rt_flags). */
typedef enum {
  SF__PROGRESS_AUTO = 0,
  SF__PROGRESS_ALWAYS,
  SF__PROGRESS_NEVER
} sf__progress_mode;

/* The runtime's own command-line flags: one field per row of
 * flagnames.h's table, of the C type of its kind.  String values point
 * into argv, which lives for the whole run, so nothing here is ever
 * freed. */
#define SF__FLAG_CTYPE_BOOL bool
#define SF__FLAG_CTYPE_INT int64_t
#define SF__FLAG_CTYPE_ENUM int32_t /* an ENUM's index: progress is an sf__progress_mode */
#define SF__FLAG_CTYPE_STR const char * /* NULL when not given */
#define SF__FLAG_FIELD(X, id, name, kind, field, ...) SF__FLAG_CTYPE_##kind field;
typedef struct sf__options_t {
  SF__RUNTIME_FLAG_ROWS(SF__FLAG_FIELD, _)
} sf__options_t;
#undef SF__FLAG_FIELD
extern sf__options_t sf__options;

typedef enum {
  SF__FLAGS_OK = 0,    /* run the program */
  SF__FLAGS_HELP,      /* --help or -h: print sf__usage, exit 0 */
  SF__FLAGS_VERSION,   /* --version: print sf__version, exit 0 */
  SF__FLAGS_ERROR = -1 /* message in err: exit 2 */
} sf__flags_result;

/* Parses argv[1..argc) into one slot per workflow parameter (out has
 * prog->nparams slots) and into sf__options.  String slots are owned (+1)
 * on success and must be given back with sf__flags_release; on any other
 * result nothing is left allocated. */
int sf__parse_flags(const sf_program *prog, int argc, char **argv, sf_value *out,
                    char *err, size_t errlen);
void sf__flags_release(const sf_program *prog, sf_value *args);
void sf__usage(const sf_program *prog, FILE *f);
void sf__version(const sf_program *prog, FILE *f);
/* Optimal-string-alignment edit distance, shared with "did you mean". */
size_t sf__edit_distance(const char *a, const char *b);

#endif