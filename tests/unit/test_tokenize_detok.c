/* Tests the MDLM detokenizers against outputs derived by hand from the rules
 * of lm1b_detokenizer / wt_detokenizer (mdlm/dataloader.py), including
 * Python's non-overlapping matching, `$` before a final newline, Unicode \w
 * and \s, and MDLM's literal "/'[0-9]/" replacement. */
#include <string.h>

#include "tests/test.h"
#include "tokenize/tokenizer.h"

typedef void (*detok_fn)(const char *, size_t, tok_bytes *);

static void check(detok_fn f, const char *name, const char *in, const char *want) {
    tok_bytes out = {0};
    tok_bytes_append(&out, "<", 1); /* output is appended, not overwritten */
    f(in, strlen(in), &out);
    size_t wl = strlen(want);
    T_EQ_INT(out.n, wl + 1, "%s(\"%s\"):\n  got  \"%.*s\"\n  want \"%s\"", name, in,
             (int)(out.n ? out.n - 1 : 0), out.v + 1, want);
    T_EQ_INT(out.v[0], '<', "%s(\"%s\"):\n  got  \"%.*s\"\n  want \"%s\"", name, in,
             (int)(out.n ? out.n - 1 : 0), out.v + 1, want);
    T_CHECK(!memcmp(out.v + 1, want, wl), "%s(\"%s\"):\n  got  \"%.*s\"\n  want \"%s\"", name, in,
            (int)(out.n ? out.n - 1 : 0), out.v + 1, want);
    tok_bytes_free(&out);
}

static void test_lm1b(void) {
    static const char *cases[][2] = {
        {"i saw it at http : / / www.example.com / page .",
         "i saw it at http://www.example.com/page."},
        {"see https : / / a.org now", "see https://a.org now"},
        {"he said , \" it 's fine \" ( really ) ; ok ?", "he said, \"it's fine\" (really); ok?"},
        /* ' (\w+) \. ' consumes its trailing space, so the next one cannot match */
        {"a b . c . d", "a b. c . d"},
        {"$ 5 and \xC2\xA3 3 !", "$5 and \xC2\xA3"
                                 "3!"},
        {"who ? me ! yes", "who? me! yes"},
        {"' quoted ' and ' another '", "'quoted' and 'another'"},
        /* [^()]+ stops at the inner '(' */
        {"( a ( b ) c )", "( a (b) c )"},
        {"[ x ] : y", "[x]: y"},
        /* \w is Unicode; "'" is not part of the run before " ." */
        {"na\xC3\xAFve '\xC3\xA9t\xC3\xA9 .", "na\xC3\xAFve'\xC3\xA9t\xC3\xA9 ."},
        /* $ matches before a final newline */
        {"end with newline .\n", "end with newline.\n"},
        {"really ?\n", "really?\n"},
        {"the u.s . is", "the u.s . is"},
        {"", ""},
        {" .", " ."},
        {"a ?", "a?"},
        /* ' (\w+) \.$' read backwards over ASCII, forwards past non-ASCII */
        {"caf\xC3\xA9 au na\xC3\xAFve .", "caf\xC3\xA9 au na\xC3\xAFve."},
        {"\xFF abc .", "\xFF abc."},
        {"a\xFF"
         "abc .",
         "a\xFF"
         "abc ."},
        {"_x9 .", "_x9 ."},
        {" _x9 .", " _x9."},
        {"a-b .", "a-b ."},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        check(detok_lm1b, "lm1b", cases[i][0], cases[i][1]);
}

static void test_wikitext(void) {
    static const char *cases[][2] = {
        {"the 1 @,@ 000 @-@ year @.@ old", "the 1,000-year.old"},
        {" = = Heading = = \n", " == Heading ==\n"},
        {" = = = = Sub = = = = \n", " ==== Sub ====\n"},
        {"( in 1990 ) , he said \" hello \" ; see [ 1 ] and { x }",
         "(in 1990), he said \"hello\"; see [1] and {x}"},
        {"the players ' scores", "the players' scores"},
        {"it 's 25 \xC2\xB0 C and N is N", "it's 25\xC2\xB0"
                                           "C and 1 is N"},
        /* MDLM's replacement is the literal text /'[0-9]/ */
        {"a/' 5/b", "a/'[0-9]/b"},
        {"line one \n line two", "line one\nline two"},
        {"x . y ! z ? w : v ; u , t", "x. y! z? w: v; u, t"},
        /* quotes pair left to right */
        {"\" a \" b \" c \"", "\"a\" b \"c\""},
        /* \s is Python's: U+00A0 counts */
        {"(\xC2\xA0x\xC2\xA0)", "(x)"},
        {"( )", "()"},
        {"( unclosed", "( unclosed"},
        {"", ""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        check(detok_wikitext, "wt", cases[i][0], cases[i][1]);
}

int main(void) {
    test_lm1b();
    test_wikitext();
    return T_DONE();
}
