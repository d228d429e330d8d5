" Vim indent file for sflow.
"
" Brace counting rather than 'cindent': sflow ends statements at the newline,
" and cindent would indent every line after one without ';' as a continuation.
" A line is indented one level more than the previous non-blank line when that
" line ends in an opener ({, [ or (), and one level less when it starts with
" a closer.
if exists("b:did_indent")
  finish
endif
let b:did_indent = 1

setlocal indentexpr=SflowIndent(v:lnum)
setlocal indentkeys=0{,0},0),0],!^F,o,O
setlocal autoindent

let b:undo_indent = "setlocal indentexpr< indentkeys< autoindent<"

if exists("*SflowIndent")
  finish
endif

function! SflowIndent(lnum) abort
  let prev = prevnonblank(a:lnum - 1)
  if prev == 0
    return 0
  endif
  " Drop a trailing // comment (a '//' inside a string is rare enough to
  " ignore here) before looking at the last character.
  let pline = substitute(getline(prev), '\s*//.*$', '', '')
  let ind = indent(prev)
  if pline =~ '[{[(]\s*$'
    let ind += shiftwidth()
  endif
  if getline(a:lnum) =~ '^\s*[}\])]'
    let ind -= shiftwidth()
  endif
  return ind < 0 ? 0 : ind
endfunction
