-- Neovim's own LSP client (vim.lsp, Neovim 0.7) driving `sflowc --lsp` on a
-- copy of tests/lsp/project; nvim_test.py runs it headless and checks what
-- it writes.  Each step records its result under a name in `out`; an error
-- in a step is recorded as that step's result, so one failure does not hide
-- the rest.  Environment: SFLOWC, PROJECT (the copy), OUT (the JSON file).
local sflowc, dir, outfile = os.getenv("SFLOWC"), os.getenv("PROJECT"), os.getenv("OUT")
local out = {}
local client_id

local function lines() return vim.api.nvim_buf_get_lines(0, 0, -1, false) end

-- The cursor on the first occurrence of needle (0-based column + offset).
local function cursor_at(needle, plus)
  for i, l in ipairs(lines()) do
    local s = l:find(needle, 1, true)
    if s then
      vim.api.nvim_win_set_cursor(0, { i, s - 1 + (plus or 0) })
      return i
    end
  end
  error("no " .. needle .. " in the buffer")
end

-- Types a new line above the one holding needle; returns the position
-- params for its end (where the cursor is in insert mode: normal mode
-- cannot put it past the last character).
local function insert_line_above(needle, text)
  local row = cursor_at(needle)
  vim.api.nvim_buf_set_lines(0, row - 1, row - 1, false, { text })
  vim.api.nvim_win_set_cursor(0, { row, #text })
  -- The client sends the change from the event loop: let it run.
  vim.wait(200, function() return false end, 20)
  local params = vim.lsp.util.make_position_params()
  params.position.character = #text
  return params
end

local function request(method, params)
  local res = vim.lsp.buf_request_sync(0, method, params or vim.lsp.util.make_position_params(), 5000)
  if not res or not res[client_id] then error(method .. ": no answer") end
  if res[client_id].err then return { error = res[client_id].err.message } end
  return res[client_id].result
end

local function step(name, f)
  local ok, r = pcall(f)
  out[name] = ok and r or { error = tostring(r) }
end

step("start", function()
  vim.cmd("edit " .. dir .. "/main.sflow")
  vim.bo.filetype = "sflow"
  client_id = vim.lsp.start_client({ name = "sflow", cmd = { sflowc, "--lsp" }, root_dir = dir,
                                     flags = { debounce_text_changes = 0 } })
  vim.lsp.buf_attach_client(0, client_id)
  local ready = vim.wait(10000, function()
    local c = vim.lsp.get_client_by_id(client_id)
    return c and c.server_capabilities and c.server_capabilities.completionProvider ~= nil
  end, 20)
  -- Diagnostics arrive for the open buffer (none: the project checks).
  vim.wait(3000, function() return false end, 100)
  return { ready = ready, diagnostics = #vim.diagnostic.get(0) }
end)

step("completion", function()
  local params = insert_line_above("  print(offset", "  let q = nn.")
  local result = request("textDocument/completion", params)
  -- What the omnifunc would offer: the client's own conversion.
  local items = vim.lsp.util.text_document_completion_list_to_complete_items(result, "Li")
  local words = {}
  for _, it in ipairs(items) do table.insert(words, it.word) end
  vim.cmd("undo")
  vim.wait(200, function() return false end, 20)
  return { words = words }
end)

step("signature", function()
  local params = insert_line_above("  print(offset", "  let a = nn.attention(t, ")
  local result = request("textDocument/signatureHelp", params)
  local md = vim.lsp.util.convert_signature_help_to_markdown_lines(result, "sflow")
  vim.cmd("undo")
  vim.wait(200, function() return false end, 20)
  return { lines = md, active = result and result.activeParameter }
end)

step("hover", function()
  cursor_at("zeros(", 1)
  local result = request("textDocument/hover")
  return { lines = vim.lsp.util.convert_input_to_markdown_lines(result.contents) }
end)

step("definition", function()
  cursor_at("zeros(", 1)
  local result = request("textDocument/definition")
  local loc = result[1] or result
  return { file = vim.uri_to_fname(loc.uri), line = loc.range.start.line }
end)

step("references", function()
  cursor_at("p.x,", 2)
  vim.fn.setqflist({})
  vim.lsp.buf.references({ includeDeclaration = true })
  vim.wait(5000, function() return #vim.fn.getqflist() > 0 end, 20)
  local files = {}
  for _, e in ipairs(vim.fn.getqflist()) do table.insert(files, vim.fn.fnamemodify(vim.fn.bufname(e.bufnr), ":t")) end
  vim.cmd("cclose")
  vim.cmd("buffer " .. vim.fn.bufnr(dir .. "/main.sflow"))
  return { files = files }
end)

step("rename", function()
  cursor_at("p.x,", 2)
  vim.lsp.buf.rename("px")
  vim.wait(5000, function()
    return table.concat(lines(), "\n"):find("p.px,", 1, true) ~= nil
  end, 20)
  local shapes = vim.fn.bufnr(dir .. "/shapes.sflow")
  return { main = lines(), shapes = shapes > 0 and vim.api.nvim_buf_get_lines(shapes, 0, -1, false) or {} }
end)

step("format", function()
  local path = dir .. "/messy.sflow"
  vim.cmd("edit " .. path)
  vim.bo.filetype = "sflow"
  vim.lsp.buf_attach_client(0, client_id)
  vim.wait(300, function() return false end, 50)
  vim.lsp.buf.formatting_sync(nil, 5000)
  return { lines = lines() }
end)

local f = io.open(outfile, "w")
f:write(vim.fn.json_encode(out))
f:close()
vim.lsp.stop_client(client_id)
vim.cmd("qa!")
