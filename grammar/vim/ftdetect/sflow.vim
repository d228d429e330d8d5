" Vim filetype detection for sflow (*.sflow).
au BufRead,BufNewFile *.sflow setf sflow
