" Vim indent file for sflow: the indentation `sflowc fmt` writes.
"
" Bracket counting rather than 'cindent': sflow ends statements at the
" newline, and cindent would indent every line after one without ';' as a
" continuation.  The rules are the formatter's (compiler/fmt.c):
"   - inside a `{` block, one level (shiftwidth) more than the statement
"     that opened it;
"   - inside `(`, `[` or a struct literal's `{`: under the first thing after
"     the opener when something follows it on its line, else one level more
"     than the statement;
"   - a line starting with a closer goes back to its opener's statement;
"   - a line starting with `.` is one level deeper; one after a line ending
"     in a binary operator is at least one level deeper than its statement.
" Strings and // comments are blanked before brackets are counted.
if exists("b:did_indent")
  finish
endif
let b:did_indent = 1

setlocal indentexpr=SflowIndent(v:lnum)
setlocal indentkeys=0{,0},0),0],0.,!^F,o,O
setlocal autoindent

let b:undo_indent = "setlocal indentexpr< indentkeys< autoindent<"

if exists("*SflowIndent")
  finish
endif

" A line's text with string contents and a trailing // comment blanked
" (columns kept), so that brackets inside them do not count.
function! s:Strings(text) abort
  return substitute(a:text, '"\%(\\.\|[^"\\]\)*"', '\=repeat("x", len(submatch(0)))', 'g')
endfunction

function! s:Blank(text) abort
  return substitute(s:Strings(a:text), '//.*$', '', '')
endfunction

function! s:Code(l) abort
  return s:Summary(getline(a:l))[2]
endfunction

" What a line leaves open and closes, memoised by its text (gg=G asks for
" the same lines again and again): [the byte indexes of the brackets it
" leaves open, last first; how many earlier brackets it closes; its code].
let s:memo = {}
function! s:Summary(text) abort
  if has_key(s:memo, a:text)
    return s:memo[a:text]
  endif
  if len(s:memo) > 20000
    let s:memo = {}
  endif
  let code = s:Blank(a:text)
  let opens = []
  let closes = 0
  let depth = 0
  let i = len(code) - 1
  while i >= 0
    let c = code[i]
    if c ==# ')' || c ==# ']' || c ==# '}'
      let depth += 1
    elseif c ==# '(' || c ==# '[' || c ==# '{'
      if depth == 0
        call add(opens, i)
      else
        let depth -= 1
      endif
    endif
    let i -= 1
  endwhile
  let s:memo[a:text] = [opens, depth, code]
  return s:memo[a:text]
endfunction

" The innermost bracket left open before line lnum: [line, byte index, char],
" or [0, 0, ''].  A line at column 0 that is not a closer starts an item:
" nothing before it is open.
function! s:Opener(lnum) abort
  let depth = 0
  let l = a:lnum - 1
  while l >= 1
    let [opens, closes, code] = s:Summary(getline(l))
    if depth < len(opens)
      return [l, opens[depth], code[opens[depth]]]
    endif
    let depth += closes - len(opens)
    if depth == 0 && code =~# '^[^ \t)\]}/]'
      break
    endif
    let l -= 1
  endwhile
  return [0, 0, '']
endfunction

" Is the { at byte i of line l a struct literal's?  (Its first field
" follows: `Point { x: 1`.)  Only one with something after it matters.
function! s:StructBrace(l, i) abort
  return strpart(s:Code(a:l), a:i + 1) =~# '^\s*\%(\h\w*\s*:\|}\)'
endfunction

" Aligns inside the bracket at byte i of line l: the column of what
" follows it on its line, or -1 when nothing does.
function! s:Align(l, i) abort
  let rest = strpart(s:Code(a:l), a:i + 1)
  if rest =~# '^\s*$'
    return -1
  endif
  return strdisplaywidth(strpart(getline(a:l), 0, a:i + 1)) + len(matchstr(rest, '^\s*'))
endfunction

" The indent of the statement line l is part of: while l starts inside a
" bracket of an earlier line that aligns or holds arguments, that line's.
function! s:StmtIndent(l) abort
  let l = a:l
  for _ in range(100)
    let [ol, oi, ch] = s:Opener(l)
    if ol == 0 || (ch ==# '{' && !(s:StructBrace(ol, oi) && s:Align(ol, oi) >= 0))
      break
    endif
    let l = ol
  endfor
  return indent(l)
endfunction

function! SflowIndent(lnum) abort
  let line = getline(a:lnum)
  let [ol, oi, ch] = s:Opener(a:lnum)
  if line =~# '^\s*[)\]}]'
    return ol ? s:StmtIndent(ol) : 0
  endif
  " Comment lines written under the trailing comment of a line of code stay
  " under it.
  if line =~# '^\s*//'
    let l = a:lnum - 1
    while l >= 1 && getline(l) =~# '^\s*//' && indent(l) == indent(a:lnum)
      let l -= 1
    endwhile
    let col = l >= 1 ? stridx(s:Strings(getline(l)), '//') : -1
    if col > 0 && getline(l) !~# '^\s*//' && col == indent(a:lnum)
      return col
    endif
  endif
  let block = ch ==# '{' && !(s:StructBrace(ol, oi) && s:Align(ol, oi) >= 0)
  if ol == 0
    let ind = 0
  elseif !block && s:Align(ol, oi) >= 0
    let ind = s:Align(ol, oi)
  else
    let ind = s:StmtIndent(ol) + shiftwidth()
  endif
  if line =~# '^\s*\.[^.]'
    return ind + shiftwidth()
  endif
  " After a binary operator (not a generic's closing >), outside brackets
  " that align: at least a level deeper; an author's deeper indent stays.
  let prev = prevnonblank(a:lnum - 1)
  let pcode = prev ? s:Code(prev) : ''
  if (ol == 0 || block) && pcode =~# '\%(&&\|||\|[-+*/%^|&=<]\|[^-]>\)\s*$'
        \ && !(pcode =~# '>\s*$' && pcode =~# '<')
    let least = ind + shiftwidth()
    return indent(a:lnum) >= least ? indent(a:lnum) : least
  endif
  return ind
endfunction
