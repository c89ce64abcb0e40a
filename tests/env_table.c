/*
 * env_table.c: prints the environment-variable table (src/params.c) as Markdown. The ctest entry
 * env_table_in_readme checks that README.md carries every row, so the docs cannot drift from the
 * one table the library reads.
 */
#include <stdio.h>

#include "params.h"

int main(void)
{
    params_print_table(stdout);
    return 0;
}
