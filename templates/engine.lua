-- engine.lua: the template compiler (etlua-like syntax, no escaping).
--   <% statements %>   <%= expression %>   <%# comment %>
--   '-%>' closes a tag and eats the newline that follows it.
-- compile() turns a template into the source of a Lua chunk whose line N
-- holds the code of template line N, so load() and run-time errors already
-- name the template line. This file runs privileged (the sandbox's own
-- globals); only the compiled chunks run in the template environment.

local find, sub, format, gsub = string.find, string.sub, string.format, string.gsub
local rep, concat, tostring, error = string.rep, table.concat, tostring, error

-- The chunk's prologue; it is called as chunk(value, concat).
local PROLOGUE = "local __buf, __val, __cat = {}, ...; "
local EPILOGUE = " return __cat(__buf)"

-- Characters that can start a string, a comment or the closing '%>' in code.
local CODE_MARK = "[%%\"'%[%-]"
local SHORT_END = { ['"'] = '[\\\n"]', ["'"] = "[\\\n']" }

-- Returns the number of newlines in `s`.
local function newlines(s)
  local _, n = gsub(s, "\n", "")
  return n
end

-- Returns `s` as a Lua string literal on one line.
local function inline(s)
  return (gsub(format("%q", s), "\\\n", "\\n"))
end

-- Returns the position after the long bracket ([[...]], [==[...]==]) that
-- opens at `pos`, or nil when none opens there.
local function skip_long(text, pos)
  local _, e, eq = find(text, "^%[(=*)%[", pos)
  if not e then return nil end
  local _, close = find(text, "]" .. eq .. "]", e + 1, true)
  return (close or #text) + 1
end

-- Returns the position after the short string whose body starts at `pos`
-- (quote `q`); an unfinished one stops at its newline, for Lua to report.
local function skip_short(text, pos, q)
  while true do
    local p, _, c = find(text, "(" .. SHORT_END[q] .. ")", pos)
    if not p then return #text + 1 end
    if c ~= "\\" then return c == q and p + 1 or p end
    pos = p + 2
  end
end

-- Returns the end of the line comment that starts at `pos`: the position
-- of its newline or of the '%>' that closes the tag, nil if neither comes.
local function comment_end(text, pos)
  local nl = find(text, "\n", pos, true)
  local close = find(text, "%>", pos, true)
  if nl and close then return nl < close and nl or close end
  return nl or close
end

-- Scans Lua code from `pos` to the '%>' that closes its tag, stepping over
-- strings and comments (a "%>" in them does not close the tag; a line
-- comment ends at the newline or at '%>'). Returns the code with line
-- comments dropped (they would swallow the code emitted after them) and
-- the position of '%>'; nil when the tag is unclosed.
local function scan_code(text, pos)
  local out, start = {}, pos
  while true do
    local p, _, c = find(text, "(" .. CODE_MARK .. ")", pos)
    if not p then return nil end
    if c == "%" and sub(text, p + 1, p + 1) == ">" then
      out[#out + 1] = sub(text, start, p - 1)
      return concat(out), p
    elseif c == '"' or c == "'" then
      pos = skip_short(text, p + 1, c)
    elseif c == "[" then
      pos = skip_long(text, p) or p + 1
    elseif sub(text, p, p + 1) == "--" then
      pos = skip_long(text, p + 2)
      if not pos then
        out[#out + 1] = sub(text, start, p - 1)
        start = comment_end(text, p + 2)
        if not start then return nil end
        pos = start
      end
    else
      pos = p + 1
    end
  end
end

-- Returns the body of the tag whose first character is at `pos` (kind "#"
-- is free text, others Lua code) and the position of its closing '%>'.
local function scan_tag(text, pos, kind)
  if kind ~= "#" then return scan_code(text, pos) end
  local close = find(text, "%>", pos, true)
  return close and sub(text, pos, close - 1), close
end

-- Returns the Lua code of one tag of kind `kind` ("=", "#" or "") with
-- body `body`, source text `src`, opening at template line `line`.
local function tag_code(name, line, kind, body, src)
  if kind == "#" then return rep("\n", newlines(src)) end
  if kind == "" then return body .. " " end
  local expr = gsub(src, "^%s*(.-)%s*$", "%1")
  local msg = format("templates/%s:%d: <%%= %s %%> is nil", name, line, expr)
  return "__buf[#__buf + 1] = __val((" .. body .. "), " .. inline(msg) .. ") "
end

-- Compiles template `text`, named `name` in messages, into the source of a
-- Lua chunk; run(chunk) renders it. Raises "templates/NAME:LINE: message"
-- for an unclosed tag.
local function compile(name, text)
  local code, pos, line = { PROLOGUE }, 1, 1
  while true do
    local open = find(text, "<%", pos, true)
    local plain = sub(text, pos, (open or #text + 1) - 1)
    -- %q writes a newline as "\" + newline: the line structure stays.
    if plain ~= "" then code[#code + 1] = "__buf[#__buf + 1] = " .. format("%q", plain) .. " " end
    line = line + newlines(plain)
    if not open then break end
    local kind = sub(text, open + 2, open + 2)
    if kind ~= "=" and kind ~= "#" then kind = "" end
    local first = open + 2 + #kind
    local body, close = scan_tag(text, first, kind)
    if not close then error(format("templates/%s:%d: unclosed <%%", name, line), 0) end
    local src = sub(text, first, close - 1)
    local trim = sub(src, -1) == "-"
    if trim then src = sub(src, 1, -2) end
    if trim and sub(body, -1) == "-" then body = sub(body, 1, -2) end
    code[#code + 1] = tag_code(name, line, kind, body, src)
    line = line + newlines(src)
    pos = close + 2
    local _, eol = find(text, "^\r?\n", pos)
    if trim and eol then
      code[#code + 1] = "\n"
      line, pos = line + 1, eol + 1
    end
  end
  code[#code + 1] = EPILOGUE
  return concat(code)
end

-- Converts the value of an expression tag; `msg` is the error when nil.
local function value(v, msg)
  if v == nil then error(msg, 0) end
  return tostring(v)
end

-- Runs a chunk made by compile() (loaded in the template environment) and
-- returns the rendered text.
local function run(chunk)
  return chunk(value, concat)
end

return { compile = compile, run = run }
