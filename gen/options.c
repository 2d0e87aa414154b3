/* gen/options.c -- checks of the generation options that the CLI and
 * moegen_generate run before anything is rendered or written. */
#include <ctype.h>
#include <string.h>
#include <strings.h>

#include "moegen/moegen.h"

#define STRING(x) #x
#define TEXT_OF(x) STRING(x)

/* Keywords of C (C23, without the _Reserved ones: a name may not start
 * with '_') and C++ (C++23), alternative operator spellings included. */
static const char *const keywords[] = {
    "alignas", "alignof", "and", "and_eq", "asm", "auto", "bitand", "bitor", "bool", "break",
    "case", "catch", "char", "char8_t", "char16_t", "char32_t", "class", "co_await", "co_return",
    "co_yield", "compl", "concept", "const", "const_cast", "consteval", "constexpr", "constinit",
    "continue", "decltype", "default", "delete", "do", "double", "dynamic_cast", "else", "enum",
    "explicit", "export", "extern", "false", "float", "for", "friend", "goto", "if", "inline",
    "int", "long", "mutable", "namespace", "new", "noexcept", "not", "not_eq", "nullptr",
    "operator", "or", "or_eq", "private", "protected", "public", "register", "reinterpret_cast",
    "requires", "restrict", "return", "short", "signed", "sizeof", "static", "static_assert",
    "static_cast", "struct", "switch", "template", "this", "thread_local", "throw", "true", "try",
    "typedef", "typeid", "typename", "typeof", "typeof_unqual", "union", "unsigned", "using",
    "virtual", "void", "volatile", "wchar_t", "while", "xor", "xor_eq", NULL};

const char *moegen_name_problem(const char *name) {
  if (!name || !*name) return "empty";
  if (!(isalpha((unsigned char)*name) || *name == '_')) return "not a C identifier";
  for (const char *p = name; *p; p++)
    if (!(isalnum((unsigned char)*p) || *p == '_')) return "not a C identifier";
  if (strlen(name) > MOEGEN_MAX_NAME) return "longer than " TEXT_OF(MOEGEN_MAX_NAME) " characters";
  if (*name == '_')
    return "reserved: identifiers that start with '_' (and so NAME_EXPERTS, ...) are the C "
           "implementation's";
  for (const char *const *k = keywords; *k; k++)
    if (strcmp(name, *k) == 0) return "a C or C++ keyword";
  if (strncasecmp(name, "moegen", 6) == 0 && (name[6] == 0 || name[6] == '_'))
    return "reserved: its symbols (NAME_image, NAME_module_create, NAME_EXPERTS, ...) would "
           "fall among the runtime's moegen_* and MOEGEN_* names";
  return NULL;
}
