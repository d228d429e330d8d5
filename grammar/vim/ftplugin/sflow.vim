" Vim filetype plugin for sflow: comment settings and formatting.
if exists("b:did_ftplugin")
  finish
endif
let b:did_ftplugin = 1

setlocal commentstring=//\ %s
setlocal comments=s1:/*,mb:*,ex:*/,://
setlocal formatoptions-=t formatoptions+=croql
setlocal suffixesadd=.sflow
" sflow's layout (what `sflowc fmt` writes): two spaces per level, no tabs.
setlocal shiftwidth=2 softtabstop=2 expandtab

let b:undo_ftplugin = "setlocal commentstring< comments< formatoptions< suffixesadd<"
      \ . " shiftwidth< softtabstop< expandtab<"
