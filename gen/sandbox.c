/* gen/sandbox.c -- the sandboxed Lua state that runs plan.lua and the
 * templates (see render.h).
 *
 * A counting allocator caps the state's memory and a count hook caps the VM
 * instructions of each call. The base, string, table and math libraries are
 * opened into the state's own globals, where the template engine
 * (templates/engine.lua) runs; chunks of plan.lua and the templates run in a
 * whitelisted environment instead. Every public function does its Lua work
 * in one protected call (sandbox_call), so no Lua error, not even a memory
 * error, escapes as a panic, and every error becomes a moegen_error.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include "float_literal.h"
#include "render.h"

#define HOOK_STEP 10000            /* VM instructions between two hook calls */
#define ENV_KEY "moegen.env"       /* registry: the template environment */
#define ENGINE_KEY "moegen.engine" /* registry: what engine.lua returned */

struct moegen_sandbox {
  lua_State *L;
  size_t memory;          /* bytes held by the state */
  size_t memory_limit;    /* most bytes it may hold */
  int refused;            /* the last allocation request was refused */
  long instructions;      /* run by the current call, in HOOK_STEP units */
  long instruction_limit; /* most instructions one call may run */
};

/* Names the template environment takes from the base library. */
static const char *const base_names[] = {"assert", "error",  "ipairs",   "pairs", "next",
                                         "select", "tonumber", "tostring", "type",  NULL};
/* Library functions the templates do not get: dump makes bytecode; random
 * would make generated source nondeterministic. */
static const char *const string_hidden[] = {"dump", NULL};
static const char *const math_hidden[] = {"random", "randomseed", NULL};
static const char *const table_hidden[] = {NULL};

/* ---------------------------------------------------------------- limits */

/* lua_Alloc: realloc that keeps count of the state's bytes and refuses to
 * grow past the memory limit (shrinking never fails, as Lua requires). */
static void *sandbox_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
  moegen_sandbox *sb = ud;
  size_t old = ptr ? osize : 0; /* with ptr NULL, osize is a type tag */
  void *block;
  if (nsize == 0) {
    free(ptr);
    sb->memory -= old;
    return NULL;
  }
  if (nsize > old && nsize - old > sb->memory_limit - sb->memory) {
    sb->refused = 1;
    return NULL;
  }
  block = realloc(ptr, nsize);
  sb->refused = block == NULL;
  if (block) sb->memory = sb->memory - old + nsize;
  return block;
}

/* Count hook: raises "LINE: instruction limit exceeded" at the running Lua
 * line once the current call has run past its instruction limit. */
static void sandbox_hook(lua_State *L, lua_Debug *ar) {
  void *ud;
  moegen_sandbox *sb;
  (void)ar;
  lua_getallocf(L, &ud);
  sb = ud;
  sb->instructions += HOOK_STEP;
  if (sb->instructions <= sb->instruction_limit) return;
  luaL_where(L, 0); /* in a hook, level 0 is the interrupted function */
  lua_pushliteral(L, "instruction limit exceeded (runaway loop?)");
  lua_concat(L, 2);
  lua_error(L);
}

/* ---------------------------------------------------------------- errors */

/* Fills `err` from the error object on top of the stack after a call that
 * failed with `status`. `name` is the template or chunk the call ran (NULL
 * for the sandbox itself); messages without a "templates/" position get
 * "templates/NAME: " (or "sandbox: ") in front. */
static void set_error(moegen_sandbox *sb, int status, const char *name, moegen_error *err) {
  lua_State *L = sb->L;
  const char *msg = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
  char where[256];
  if (name)
    snprintf(where, sizeof where, "templates/%s", name);
  else
    snprintf(where, sizeof where, "sandbox");
  err->code = EX_SOFTWARE;
  if (status == LUA_ERRMEM || sb->refused)
    snprintf(err->msg, sizeof err->msg, "%s: memory limit exceeded", where);
  else if (!msg)
    snprintf(err->msg, sizeof err->msg, "%s: (error object is a %s value)", where,
             luaL_typename(L, -1));
  else if (strncmp(msg, "templates/", 10) == 0)
    snprintf(err->msg, sizeof err->msg, "%s", msg);
  else
    snprintf(err->msg, sizeof err->msg, "%s: %s", where, msg);
}

/* Runs `step` with `ud` (as a light userdata) in protected mode, with a
 * fresh instruction count. Returns 0, or EX_SOFTWARE with `err` filled for
 * `name` (see set_error). Leaves the stack empty. */
static int sandbox_call(moegen_sandbox *sb, lua_CFunction step, void *ud, const char *name,
                        moegen_error *err) {
  lua_State *L = sb->L;
  int status;
  sb->instructions = 0;
  sb->refused = 0;
  lua_pushcfunction(L, step);
  lua_pushlightuserdata(L, ud);
  status = lua_pcall(L, 1, 0, 0);
  if (status != LUA_OK) set_error(sb, status, name, err);
  lua_settop(L, 0);
  return status == LUA_OK ? 0 : EX_SOFTWARE;
}

/* ---------------------------------------------------------------- environment */

/* Returns whether `name` is in the NULL-terminated list `names`. */
static int listed(const char *name, const char *const *names) {
  for (; *names; names++)
    if (strcmp(name, *names) == 0) return 1;
  return 0;
}

/* Pushes a copy of global library table `lib` without the names in
 * `hidden`. */
static void push_library_copy(lua_State *L, const char *lib, const char *const *hidden) {
  lua_newtable(L);
  lua_getglobal(L, lib);
  lua_pushnil(L);
  while (lua_next(L, -2)) { /* copy, lib, key, value */
    if (lua_type(L, -2) == LUA_TSTRING && listed(lua_tostring(L, -2), hidden)) {
      lua_pop(L, 1);
      continue;
    }
    lua_pushvalue(L, -2);
    lua_insert(L, -2);
    lua_rawset(L, -5);
  }
  lua_pop(L, 1);
}

/* include(name): returns the text of embedded file `name`. */
static int sandbox_include(lua_State *L) {
  const char *name = luaL_checkstring(L, 1);
  const moegen_embedded_file *f = moegen_embedded_find(name);
  if (!f) return luaL_error(L, "no embedded file %s", name);
  lua_pushlstring(L, f->data, f->size);
  return 1;
}

/* float_literal(x): x rounded to a float, spelled as a C99 hexadecimal
 * literal with an f suffix ("0x1.4p+1f") that reads back to exactly that
 * float; an error if x does not round to a normal float. Every floating
 * value a template writes into kernel source goes through it. */
static int sandbox_float_literal(lua_State *L) {
  double d = luaL_checknumber(L, 1);
  float f;
  char text[MOEGEN_FLOAT_LITERAL_SIZE];
  if (!moegen_float_of(d, &f))
    return luaL_error(L, "float_literal(%f): does not round to a normal float", d);
  moegen_float_literal(f, text, sizeof text);
  lua_pushstring(L, text);
  return 1;
}

/* Builds the template environment shared by all calls (the whitelisted base
 * functions, include and float_literal; cfg, opt and results are added to
 * it later) and stores it at registry[ENV_KEY]. */
static void build_env(lua_State *L) {
  const char *const *n;
  lua_newtable(L);
  for (n = base_names; *n; n++) {
    lua_getglobal(L, *n);
    lua_setfield(L, -2, *n);
  }
  lua_pushcfunction(L, sandbox_include);
  lua_setfield(L, -2, "include");
  lua_pushcfunction(L, sandbox_float_literal);
  lua_setfield(L, -2, "float_literal");
  lua_setfield(L, LUA_REGISTRYINDEX, ENV_KEY);
}

/* Pushes the environment of one call: a table holding fresh copies of the
 * string, table and math libraries that reads through to the template
 * environment, so what a chunk assigns, even string.format, dies with the
 * call. The string metatable's __index becomes this call's string table,
 * so method calls ("x"):f() see the same whitelist. */
static void push_call_env(lua_State *L) {
  lua_newtable(L);
  push_library_copy(L, LUA_STRLIBNAME, string_hidden);
  lua_pushliteral(L, "");
  lua_getmetatable(L, -1);
  lua_pushvalue(L, -3);
  lua_setfield(L, -2, "__index");
  lua_pop(L, 2);
  lua_setfield(L, -2, LUA_STRLIBNAME);
  push_library_copy(L, LUA_TABLIBNAME, table_hidden);
  lua_setfield(L, -2, LUA_TABLIBNAME);
  push_library_copy(L, LUA_MATHLIBNAME, math_hidden);
  lua_setfield(L, -2, LUA_MATHLIBNAME);
  lua_createtable(L, 0, 1);
  lua_getfield(L, LUA_REGISTRYINDEX, ENV_KEY);
  lua_setfield(L, -2, "__index");
  lua_setmetatable(L, -2);
}

/* Loads `code` (text only) as chunk "=templates/NAME" running in a fresh
 * call environment and pushes it; raises the load error. */
static void load_chunk(lua_State *L, const char *name, const char *code, size_t len) {
  const char *chunk_name = lua_pushfstring(L, "=templates/%s", name);
  if (luaL_loadbufferx(L, code, len, chunk_name, "t") != LUA_OK) lua_error(L);
  lua_remove(L, -2);
  push_call_env(L);
  lua_setupvalue(L, -2, 1); /* a main chunk's only upvalue is _ENV */
}

/* Pushes function `name` of the engine. */
static void push_engine(lua_State *L, const char *name) {
  lua_getfield(L, LUA_REGISTRYINDEX, ENGINE_KEY);
  lua_getfield(L, -1, name);
  lua_remove(L, -2);
}

/* ---------------------------------------------------------------- protected steps */

/* Step: opens the libraries, builds the environment, loads the engine. */
static int open_step(lua_State *L) {
  static const luaL_Reg libs[] = {{LUA_GNAME, luaopen_base},
                                  {LUA_STRLIBNAME, luaopen_string},
                                  {LUA_TABLIBNAME, luaopen_table},
                                  {LUA_MATHLIBNAME, luaopen_math},
                                  {NULL, NULL}};
  const luaL_Reg *lib;
  const moegen_embedded_file *engine = moegen_embedded_find("engine.lua");
  for (lib = libs; lib->name; lib++) {
    luaL_requiref(L, lib->name, lib->func, 1);
    lua_pop(L, 1);
  }
  build_env(L);
  if (!engine) return luaL_error(L, "no embedded file engine.lua");
  if (luaL_loadbufferx(L, engine->data, engine->size, "=templates/engine.lua", "t") != LUA_OK)
    return lua_error(L);
  lua_call(L, 0, 1);
  if (!lua_istable(L, -1)) return luaL_error(L, "returned %s, not a table", luaL_typename(L, -1));
  lua_setfield(L, LUA_REGISTRYINDEX, ENGINE_KEY);
  return 0;
}

/* Pushes field `f` of `c` as its Lua value (enums as their names). */
static void push_field(lua_State *L, const moegen_config *c, moegen_field f) {
  switch (f) {
  case MOEGEN_F_NAME: lua_pushstring(L, c->name); break;
  case MOEGEN_F_EXPERTS: lua_pushinteger(L, c->experts); break;
  case MOEGEN_F_TOPK: lua_pushinteger(L, c->topk); break;
  case MOEGEN_F_HIDDEN: lua_pushinteger(L, c->hidden); break;
  case MOEGEN_F_FFN: lua_pushinteger(L, c->ffn); break;
  case MOEGEN_F_SCORE: lua_pushstring(L, moegen_score_name(c->score)); break;
  case MOEGEN_F_PRE_SOFTMAX: lua_pushboolean(L, c->pre_softmax); break;
  case MOEGEN_F_GROUPS: lua_pushinteger(L, c->groups); break;
  case MOEGEN_F_GROUP_TOPK: lua_pushinteger(L, c->group_topk); break;
  case MOEGEN_F_EXPERT_BIAS: lua_pushboolean(L, c->expert_bias); break;
  case MOEGEN_F_SCALING: lua_pushnumber(L, c->scaling); break;
  case MOEGEN_F_LOGITS_DTYPE: lua_pushstring(L, moegen_dtype_name(c->logits_dtype)); break;
  case MOEGEN_F_DTYPE: lua_pushstring(L, moegen_dtype_name(c->dtype)); break;
  case MOEGEN_F_SHARED_EXPERTS: lua_pushinteger(L, c->shared_experts); break;
  case MOEGEN_F_AUX_LOSS_COEFF: lua_pushnumber(L, c->aux_loss_coeff); break;
  case MOEGEN_F_QUANTILE_BALANCING: lua_pushboolean(L, c->quantile_balancing); break;
  case MOEGEN_F_ROUTER_BWD: lua_pushstring(L, moegen_router_bwd_name(c->router_bwd)); break;
  case MOEGEN_F_RECIPE: lua_pushstring(L, moegen_recipe_name(c->recipe)); break;
  case MOEGEN_F_FP8_GRAD_FORMAT:
    lua_pushstring(L, moegen_fp8_grad_format_name(c->fp8_grad_format));
    break;
  case MOEGEN_F_FP8_SCALE: lua_pushstring(L, moegen_fp8_scale_name(c->fp8_scale)); break;
  case MOEGEN_F_COUNT: lua_pushnil(L); break; /* not a field */
  }
}

/* Step: sets global cfg to the config (argument: the moegen_config). */
static int config_step(lua_State *L) {
  const moegen_config *c = lua_touserdata(L, 1);
  int f;
  lua_getfield(L, LUA_REGISTRYINDEX, ENV_KEY);
  lua_createtable(L, 0, MOEGEN_F_COUNT);
  for (f = 0; f < MOEGEN_F_COUNT; f++) {
    push_field(L, c, (moegen_field)f);
    lua_setfield(L, -2, moegen_config_key_name((moegen_field)f));
  }
  lua_setfield(L, -2, "cfg");
  return 0;
}

struct strings_args {
  const char *name;
  const char *const *kv;
};

/* Step: sets global a->name to a table of the string pairs a->kv. */
static int strings_step(lua_State *L) {
  const struct strings_args *a = lua_touserdata(L, 1);
  const char *const *kv;
  lua_getfield(L, LUA_REGISTRYINDEX, ENV_KEY);
  lua_newtable(L);
  for (kv = a->kv; kv[0]; kv += 2) {
    lua_pushstring(L, kv[1]);
    lua_setfield(L, -2, kv[0]);
  }
  lua_setfield(L, -2, a->name);
  return 0;
}

struct run_args {
  const char *name, *code, *result;
};

/* Step: runs chunk a->code and stores its table result as global
 * a->result. */
static int run_step(lua_State *L) {
  const struct run_args *a = lua_touserdata(L, 1);
  load_chunk(L, a->name, a->code, strlen(a->code));
  lua_call(L, 0, 1);
  if (!lua_istable(L, -1)) return luaL_error(L, "returned %s, not a table", luaL_typename(L, -1));
  lua_getfield(L, LUA_REGISTRYINDEX, ENV_KEY);
  lua_insert(L, -2);
  lua_setfield(L, -2, a->result);
  return 0;
}

struct render_args {
  const char *name, *text;
  char *out;
};

/* Step: compiles template a->text, runs it, copies the text to a->out. */
static int render_step(lua_State *L) {
  struct render_args *a = lua_touserdata(L, 1);
  size_t len;
  const char *s;
  push_engine(L, "compile");
  lua_pushstring(L, a->name);
  lua_pushstring(L, a->text);
  lua_call(L, 2, 1);
  s = lua_tolstring(L, -1, &len);
  load_chunk(L, a->name, s, len);
  push_engine(L, "run");
  lua_insert(L, -2);
  lua_call(L, 1, 1);
  s = lua_tolstring(L, -1, &len);
  a->out = malloc(len + 1);
  if (!a->out) return luaL_error(L, "out of memory for the rendered text");
  memcpy(a->out, s, len + 1);
  return 0;
}

struct int_args {
  const char *path;
  long value;
};

/* Step: reads integer a->path ("plan.router.threads") into a->value. */
static int int_step(lua_State *L) {
  struct int_args *a = lua_touserdata(L, 1);
  const char *part = a->path, *dot;
  lua_getfield(L, LUA_REGISTRYINDEX, ENV_KEY);
  for (;;) {
    dot = strchr(part, '.');
    lua_pushlstring(L, part, dot ? (size_t)(dot - part) : strlen(part));
    lua_rawget(L, -2);
    lua_remove(L, -2);
    if (!dot) break;
    if (!lua_istable(L, -1)) {
      const char *prefix = lua_pushlstring(L, a->path, (size_t)(dot - a->path));
      return luaL_error(L, "%s: %s is %s, not a table", a->path, prefix, luaL_typename(L, -2));
    }
    part = dot + 1;
  }
  if (!lua_isinteger(L, -1))
    return luaL_error(L, "%s: expected an integer, got %s", a->path,
                      lua_type(L, -1) == LUA_TNUMBER ? "a float" : luaL_typename(L, -1));
  a->value = (long)lua_tointeger(L, -1);
  return 0;
}

/* ---------------------------------------------------------------- API */

int moegen_sandbox_open(moegen_sandbox **out, size_t memory_limit, long instruction_limit,
                        moegen_error *err) {
  moegen_sandbox *sb = calloc(1, sizeof *sb);
  int rc;
  *out = NULL;
  if (sb) {
    sb->memory_limit = memory_limit ? memory_limit : MOEGEN_SANDBOX_MEMORY;
    sb->instruction_limit = instruction_limit ? instruction_limit : MOEGEN_SANDBOX_INSTRUCTIONS;
    sb->L = lua_newstate(sandbox_alloc, sb);
  }
  if (!sb || !sb->L) {
    rc = sb && sb->refused ? EX_SOFTWARE : EX_OSERR;
    free(sb);
    err->code = rc;
    snprintf(err->msg, sizeof err->msg, "sandbox: %s",
             rc == EX_SOFTWARE ? "memory limit exceeded" : "out of memory for the Lua state");
    return rc;
  }
  lua_sethook(sb->L, sandbox_hook, LUA_MASKCOUNT, HOOK_STEP);
  rc = sandbox_call(sb, open_step, NULL, "engine.lua", err);
  if (rc) {
    moegen_sandbox_close(sb);
    return rc;
  }
  *out = sb;
  return 0;
}

void moegen_sandbox_close(moegen_sandbox *sb) {
  if (!sb) return;
  lua_close(sb->L);
  free(sb);
}

int moegen_sandbox_set_config(moegen_sandbox *sb, const moegen_config *cfg, moegen_error *err) {
  return sandbox_call(sb, config_step, (void *)cfg, NULL, err);
}

int moegen_sandbox_set_strings(moegen_sandbox *sb, const char *name, const char *const *kv,
                               moegen_error *err) {
  struct strings_args a = {name, kv};
  return sandbox_call(sb, strings_step, &a, NULL, err);
}

int moegen_sandbox_run(moegen_sandbox *sb, const char *chunk_name, const char *code,
                       const char *result_name, moegen_error *err) {
  struct run_args a = {chunk_name, code, result_name};
  return sandbox_call(sb, run_step, &a, chunk_name, err);
}

int moegen_sandbox_render(moegen_sandbox *sb, const char *template_name, const char *text,
                          char **out, moegen_error *err) {
  struct render_args a = {template_name, text, NULL};
  int rc = sandbox_call(sb, render_step, &a, template_name, err);
  *out = a.out;
  return rc;
}

int moegen_sandbox_get_int(moegen_sandbox *sb, const char *path, long *value, moegen_error *err) {
  struct int_args a = {path, 0};
  int rc = sandbox_call(sb, int_step, &a, NULL, err);
  if (!rc) *value = a.value;
  return rc;
}
