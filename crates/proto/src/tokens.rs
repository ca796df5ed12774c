//! memcached's command-line tokenizer: split on single spaces (runs of spaces yield no empty
//! tokens) and keep at most `MAX_TOKENS - 1` tokens, the rest of the line being left unsplit.
//! A NUL is a byte like any other (memcached 1.6.40's tokenizer; 1.6.39 and before worked on
//! a C string and stopped there).

/// memcached's MAX_TOKENS: 23 real tokens plus a terminal one.
pub const MAX_TOKENS: usize = 24;

pub struct Tokens<'a> {
    toks: [&'a [u8]; MAX_TOKENS],
    /// Real tokens found (without memcached's terminal token).
    pub n: usize,
    /// Unsplit remainder when the token limit was reached (memcached's non-NULL terminal).
    pub rest: &'a [u8],
}

impl<'a> Tokens<'a> {
    pub fn split(line: &'a [u8]) -> Self {
        let mut t = Tokens {
            toks: [&[][..]; MAX_TOKENS],
            n: 0,
            rest: &[],
        };
        let mut start = 0;
        let mut i = 0;
        while i < line.len() {
            if line[i] == b' ' {
                if start != i {
                    t.toks[t.n] = &line[start..i];
                    t.n += 1;
                    if t.n == MAX_TOKENS - 1 {
                        t.rest = &line[i + 1..];
                        return t;
                    }
                }
                start = i + 1;
            }
            i += 1;
        }
        if start != line.len() {
            t.toks[t.n] = &line[start..];
            t.n += 1;
        }
        t
    }

    pub fn get(&self, i: usize) -> &'a [u8] {
        if i < self.n {
            self.toks[i]
        } else {
            &[]
        }
    }

    /// The last real token is "noreply" (memcached's `set_noreply_maybe`).
    pub fn noreply(&self) -> bool {
        self.n > 0 && self.toks[self.n - 1] == b"noreply"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_of_spaces_and_nul() {
        let t = Tokens::split(b"  set  k 0 ");
        assert_eq!(t.n, 3);
        assert_eq!(t.get(0), b"set");
        assert_eq!(t.get(2), b"0");
        let t = Tokens::split(b"get a\0b c");
        assert_eq!(t.n, 3);
        assert_eq!(t.get(1), b"a\0b");
    }

    #[test]
    fn token_limit_leaves_rest() {
        let line: Vec<u8> = (0..30)
            .map(|i| format!("t{i} "))
            .collect::<String>()
            .into_bytes();
        let t = Tokens::split(&line);
        assert_eq!(t.n, MAX_TOKENS - 1);
        assert!(t.rest.starts_with(b"t23 "));
    }
}
