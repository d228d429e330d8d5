/*
 * ast.c — AST constructors and the `--emit=ast` dump.
 *
 * The dump is a stable, indented S-expression-like tree: one node per line,
 * `Kind detail @line:col`, children indented two spaces, types shown as
 * `: T` once sema has run.  Golden tests compare it, so its shape changes
 * only on purpose.
 */
#include "sflowc.h"
#include "parser.h"

#include <string.h>

Node *node_new(NodeKind k, Loc loc) {
  Node *n = arena_alloc(sizeof(Node));
  n->kind = k;
  n->loc = loc;
  return n;
}

Decl *decl_new(DeclKind k, Loc loc) {
  Decl *d = arena_alloc(sizeof(Decl));
  d->kind = k;
  d->loc = loc;
  d->name_loc = loc;
  return d;
}

TypeExpr *texpr_new(TypeExprKind k, Loc loc) {
  TypeExpr *t = arena_alloc(sizeof(TypeExpr));
  t->kind = k;
  t->loc = loc;
  return t;
}

Annot *annot_new(Loc loc, const char *name, Node *args) {
  Annot *a = arena_alloc(sizeof(Annot));
  a->loc = loc;
  a->name = name;
  a->args = args;
  return a;
}

const char *extern_c_name(Decl *fn) {
  const char *mod = fn->module ? fn->module->name : "";
  if (!strncmp(mod, "std.", 4))
    mod += 4;
  char *s = arena_printf("sf_std_%s_%s", mod, fn->name);
  for (char *c = s; *c; c++)
    if (*c == '.')
      *c = '_';
  return s;
}

Loc loc_span(Loc a, Loc b) {
  if (a.file != b.file || b.off + b.len < a.off)
    return a;
  a.len = b.off + b.len - a.off;
  return a;
}

int list_len(Node *n) {
  int k = 0;
  for (; n; n = n->next)
    k++;
  return k;
}

bool ast_assigns(Node *n, Var *v) {
  for (; n; n = n->next) {
    if (n->kind == N_ASSIGN && n->lhs->kind == N_NAME && n->lhs->var == v)
      return true;
    if (ast_assigns(n->lhs, v) || ast_assigns(n->rhs, v) || ast_assigns(n->cond, v) ||
        ast_assigns(n->then, v) || ast_assigns(n->els, v) || ast_assigns(n->body, v))
      return true;
  }
  return false;
}

/* ----------------------------------------------------------------- dump */

static const char *op_str(int op) {
  switch (op) {
  case TOK_OROR: return "||";
  case TOK_ANDAND: return "&&";
  case TOK_EQ: return "==";
  case TOK_NE: return "!=";
  case TOK_LE: return "<=";
  case TOK_GE: return ">=";
  case TOK_SHL: return "<<";
  case TOK_SHR: return ">>";
  }
  static char buf[8][2];
  static int i;
  i = (i + 1) % 8;
  buf[i][0] = (char)op;
  buf[i][1] = 0;
  return buf[i];
}

static void indent(Buf *b, int d) {
  for (int i = 0; i < d; i++)
    buf_puts(b, "  ");
}

static void texpr_str(Buf *b, TypeExpr *t) {
  if (!t) {
    buf_puts(b, "?");
    return;
  }
  switch (t->kind) {
  case TE_NAME:
    if (t->module)
      buf_printf(b, "%s.", t->module);
    buf_puts(b, t->name);
    break;
  case TE_ARRAY:
    if (t->arg && t->arg->kind == TE_FN) { /* (fn(i64) -> i64)[], as written */
      buf_putc(b, '(');
      texpr_str(b, t->arg);
      buf_puts(b, ")[]");
      break;
    }
    texpr_str(b, t->arg);
    buf_puts(b, "[]");
    break;
  case TE_GENERIC:
    buf_printf(b, "%s<", t->name);
    texpr_str(b, t->arg);
    if (t->arg2) {
      buf_puts(b, ", ");
      texpr_str(b, t->arg2);
    }
    buf_puts(b, ">");
    break;
  case TE_FN:
    buf_puts(b, "fn(");
    for (TypeExpr *p = t->arg; p; p = p->next) {
      texpr_str(b, p);
      if (p->next)
        buf_puts(b, ", ");
    }
    buf_puts(b, ")");
    if (t->ret) {
      buf_puts(b, " -> ");
      texpr_str(b, t->ret);
    }
    break;
  }
}

static void quoted(Buf *b, const char *s, size_t n) {
  buf_putc(b, '"');
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c == '"' || c == '\\')
      buf_printf(b, "\\%c", c);
    else if (c == '\n')
      buf_puts(b, "\\n");
    else if (c == '\t')
      buf_puts(b, "\\t");
    else if (c < 0x20 || c == 0x7f)
      buf_printf(b, "\\x%02x", c);
    else
      buf_putc(b, (char)c);
  }
  buf_putc(b, '"');
}

static void dump_node(Buf *b, Node *n, int d);

static void head(Buf *b, Node *n, int d, const char *kind) {
  indent(b, d);
  if (n->argname)
    buf_printf(b, "%s= ", n->argname);
  buf_puts(b, kind);
}

static void tail(Buf *b, Node *n) {
  if (n->ty)
    buf_printf(b, " : %s", ty_str(n->ty));
  buf_printf(b, " @%d:%d\n", n->loc.line, n->loc.col);
}

static void dump_node(Buf *b, Node *n, int d) {
  /* --emit=parse runs before sema's depth check: cut very deep trees
   * (a 100k-term `1 + 1 + ...`) instead of overflowing the stack. */
  if (d > 1000) {
    buf_printf(b, "%*s...\n", 2 * d, "");
    return;
  }
  switch (n->kind) {
  case N_INT:
    head(b, n, d, "Int");
    buf_printf(b, " %lld", (long long)n->ival);
    tail(b, n);
    return;
  case N_FLOAT:
    head(b, n, d, "Float");
    buf_printf(b, " %.17g", n->fval);
    tail(b, n);
    return;
  case N_BOOL:
    head(b, n, d, "Bool");
    buf_puts(b, n->ival ? " true" : " false");
    tail(b, n);
    return;
  case N_STR:
    head(b, n, d, "Str ");
    quoted(b, n->sval, n->slen);
    tail(b, n);
    return;
  case N_NAME:
    head(b, n, d, "Name ");
    buf_puts(b, n->name);
    tail(b, n);
    return;
  case N_BINARY:
    head(b, n, d, "Binary ");
    buf_puts(b, op_str(n->op));
    tail(b, n);
    dump_node(b, n->lhs, d + 1);
    dump_node(b, n->rhs, d + 1);
    return;
  case N_UNARY:
    head(b, n, d, "Unary ");
    buf_puts(b, op_str(n->op));
    tail(b, n);
    dump_node(b, n->lhs, d + 1);
    return;
  case N_CALL:
    head(b, n, d, "Call");
    tail(b, n);
    dump_node(b, n->callee, d + 1);
    for (Node *a = n->args; a; a = a->next)
      dump_node(b, a, d + 1);
    return;
  case N_INDEX:
    head(b, n, d, "Index");
    tail(b, n);
    dump_node(b, n->lhs, d + 1);
    dump_node(b, n->rhs, d + 1);
    return;
  case N_FIELD:
    head(b, n, d, "Field ");
    buf_puts(b, n->name);
    tail(b, n);
    dump_node(b, n->lhs, d + 1);
    return;
  case N_ARRAY_LIT:
    head(b, n, d, "Array");
    tail(b, n);
    for (Node *a = n->args; a; a = a->next)
      dump_node(b, a, d + 1);
    return;
  case N_COMPREH:
    head(b, n, d, "Comprehension ");
    buf_puts(b, n->name);
    tail(b, n);
    dump_node(b, n->lhs, d + 1);
    dump_node(b, n->rhs, d + 1);
    return;
  case N_RANGE:
    head(b, n, d, "Range");
    tail(b, n);
    dump_node(b, n->lhs, d + 1);
    dump_node(b, n->rhs, d + 1);
    return;
  case N_STRUCT_LIT:
    head(b, n, d, "StructLit ");
    if (n->qual)
      buf_printf(b, "%s.", n->qual);
    buf_puts(b, n->name);
    tail(b, n);
    for (Node *a = n->args; a; a = a->next)
      dump_node(b, a, d + 1);
    return;
  case N_FIELD_INIT:
    head(b, n, d, "FieldInit ");
    buf_puts(b, n->name);
    tail(b, n);
    dump_node(b, n->lhs, d + 1);
    return;
  case N_AWAIT:
    head(b, n, d, "Await");
    tail(b, n);
    dump_node(b, n->lhs, d + 1);
    return;
  case N_SPAWN:
    head(b, n, d, "Spawn");
    tail(b, n);
    dump_node(b, n->lhs, d + 1);
    if (n->rhs) {
      indent(b, d + 1);
      buf_puts(b, "count\n");
      dump_node(b, n->rhs, d + 2);
    }
    return;
  case N_MAP_NEW:
    head(b, n, d, "MapNew ");
    texpr_str(b, n->texpr);
    tail(b, n);
    return;
  case N_LAUNCH:
    head(b, n, d, "Launch ");
    buf_puts(b, n->name);
    tail(b, n);
    indent(b, d + 1);
    buf_puts(b, "threads\n");
    dump_node(b, n->rhs, d + 2);
    for (Node *a = n->args; a; a = a->next)
      dump_node(b, a, d + 1);
    return;
  case N_LET:
    head(b, n, d, n->ival ? "Var " : "Let ");
    buf_puts(b, n->name);
    if (n->texpr) {
      buf_puts(b, ": ");
      texpr_str(b, n->texpr);
    }
    tail(b, n);
    if (n->lhs)
      dump_node(b, n->lhs, d + 1);
    return;
  case N_ASSIGN:
    head(b, n, d, "Assign ");
    if (n->op != '=')
      buf_puts(b, op_str(n->op));
    buf_puts(b, "=");
    tail(b, n);
    dump_node(b, n->lhs, d + 1);
    dump_node(b, n->rhs, d + 1);
    return;
  case N_EXPR_STMT:
    head(b, n, d, "ExprStmt");
    tail(b, n);
    dump_node(b, n->lhs, d + 1);
    return;
  case N_IF:
    head(b, n, d, "If");
    tail(b, n);
    dump_node(b, n->cond, d + 1);
    dump_node(b, n->then, d + 1);
    if (n->els) {
      indent(b, d);
      buf_puts(b, "Else\n");
      dump_node(b, n->els, d + 1);
    }
    return;
  case N_WHILE:
    head(b, n, d, "While");
    tail(b, n);
    dump_node(b, n->cond, d + 1);
    dump_node(b, n->body, d + 1);
    return;
  case N_FOR:
    head(b, n, d, "For ");
    buf_puts(b, n->name);
    tail(b, n);
    dump_node(b, n->rhs, d + 1);
    dump_node(b, n->body, d + 1);
    return;
  case N_BREAK:
    head(b, n, d, "Break");
    tail(b, n);
    return;
  case N_CONTINUE:
    head(b, n, d, "Continue");
    tail(b, n);
    return;
  case N_RETURN:
    head(b, n, d, "Return");
    tail(b, n);
    if (n->lhs)
      dump_node(b, n->lhs, d + 1);
    return;
  case N_BLOCK:
    head(b, n, d, "Block");
    tail(b, n);
    for (Node *s = n->body; s; s = s->next)
      dump_node(b, s, d + 1);
    return;
  }
  ice("unknown node kind %d", n->kind);
}

static void dump_annots(Buf *b, Annot *a, int d) {
  for (; a; a = a->next) {
    indent(b, d);
    buf_printf(b, "@%s @%d:%d\n", a->name, a->loc.line, a->loc.col);
    for (Node *x = a->args; x; x = x->next)
      dump_node(b, x, d + 1);
  }
}

static void dump_params(Buf *b, Decl *p, int d) {
  for (; p; p = p->next) {
    indent(b, d);
    buf_printf(b, "Param %s: ", p->name);
    texpr_str(b, p->texpr);
    buf_printf(b, " @%d:%d\n", p->loc.line, p->loc.col);
    if (p->value)
      dump_node(b, p->value, d + 1);
  }
}

static const char *decl_kind_name(DeclKind k) {
  static const char *names[] = {"Import", "Const", "Struct", "Fn", "Kernel", "Task",
                                "Actor", "Workflow", "Field", "Param", "Init", "Method"};
  return names[k];
}

static void dump_decl(Buf *b, Decl *x, int d) {
  indent(b, d);
  buf_printf(b, "%s %s", decl_kind_name(x->kind), x->kind == D_IMPORT ? x->path : x->name);
  if ((x->kind == D_CONST || x->kind == D_FIELD) && x->texpr) {
    buf_puts(b, ": ");
    texpr_str(b, x->texpr);
  }
  if (x->ret) {
    buf_puts(b, " -> ");
    texpr_str(b, x->ret);
  }
  if (x->kind == D_FIELD && !x->mutable)
    buf_puts(b, " (let)");
  buf_printf(b, " @%d:%d\n", x->loc.line, x->loc.col);
  dump_annots(b, x->annots, d + 1);
  dump_params(b, x->params, d + 1);
  if (x->value)
    dump_node(b, x->value, d + 1);
  for (Decl *f = x->fields; f; f = f->next)
    dump_decl(b, f, d + 1);
  if (x->init)
    dump_decl(b, x->init, d + 1);
  for (Decl *m = x->methods; m; m = m->next)
    dump_decl(b, m, d + 1);
  if (x->body)
    dump_node(b, x->body, d + 1);
}

void ast_dump(Module *m, Buf *out) {
  buf_printf(out, "Module %s\n", m->name && *m->name ? m->name : "main");
  for (Decl *d = m->decls; d; d = d->next)
    dump_decl(out, d, 1);
}
