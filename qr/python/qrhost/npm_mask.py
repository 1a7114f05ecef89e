"""npm `qrcode`'s mask penalty (its `lib/core/mask-pattern.js`: N1 + N2 + N3 + N4), the rule
`qr_core` reimplements, so that tier 0 picks the mask the Rust tiers pick (docs/qr.md).

Neither Python library scores masks this way: `qrcode` scores with the format modules
left light and rates N4 as ``int(|dark% - 50| / 5)``, `segno` scores before drawing the
format modules; both pick another mask for some texts (docs/qr-python.md). So tier 0 asks
the library for each of the eight masked symbols and scores them here.

The symbol is held as bit lines, one Python int per row and per column (bit x of row y is
the module at column x), and the rule is shifts, ANDs and ``int.bit_count`` per line, as
`qr_core`'s own `penalty_lines` does; the module-by-module transcription of npm's code is
the tests' oracle (`tests/test_npm_mask.py`).
"""

# N3's finder-like pattern, 1011101 then four light modules, first module first.
_FINDER = (1, 0, 1, 1, 1, 0, 1, 0, 0, 0, 0)


def bit_lines(matrix):
    """(rows, cols) of a square matrix of truthy/falsy modules, as ints."""
    size = len(matrix)
    rows = []
    for row in matrix:
        line = 0
        for x, dark in enumerate(row):
            if dark:
                line |= 1 << x
        rows.append(line)
    cols = [0] * size
    for y, line in enumerate(rows):
        bit = 1 << y
        x = 0
        while line:
            if line & 1:
                cols[x] |= bit
            line >>= 1
            x += 1
    return rows, cols


def penalty(matrix):
    """npm qrcode's penalty of a square module matrix (format modules drawn)."""
    rows, cols = bit_lines(matrix)
    return penalty_lines(rows, cols, len(matrix))


def penalty_lines(rows, cols, size):
    """The penalty of a symbol given as bit lines (see `bit_lines`)."""
    points = 0
    full = (1 << size) - 1
    pairs = (1 << (size - 1)) - 1
    finder_span = (1 << (size + 1 - len(_FINDER))) - 1
    for line in rows + cols:
        # N1: a run of L >= 5 equal modules scores 3 + (L - 5). Bit x of `five` says
        # modules x..x+4 are equal: a run of L has L - 4 such bits in a row, so it scores
        # its `five` bits plus 2 for the first of them.
        same = ~(line ^ (line >> 1)) & pairs
        five = same & (same >> 1) & (same >> 2) & (same >> 3)
        points += five.bit_count() + 2 * (five & ~(five << 1)).bit_count()
        # N3: 1011101 with four light modules on one side, 11 modules, both ways.
        light = ~line & full
        forward = backward = finder_span
        for k, dark in enumerate(_FINDER):
            forward &= (line if dark else light) >> k
            backward &= (line if _FINDER[-1 - k] else light) >> k
        points += 40 * (forward.bit_count() + backward.bit_count())
    # N2: 2x2 blocks of one colour.
    blocks = 0
    for a, b in zip(rows, rows[1:]):
        both = a & b & (a >> 1) & (b >> 1)
        neither = ~(a | b | (a >> 1) | (b >> 1))
        blocks += ((both | neither) & pairs).bit_count()
    points += 3 * blocks
    # N4: dark share away from 50 %, JS: |ceil(dark*100/total/5) - 10| * 10 (exact in
    # integers: a non-integer quotient is at least 1/(5*total) away from an integer).
    total = size * size
    dark = sum(line.bit_count() for line in rows)
    k = abs(-(-dark * 20 // total) - 10)
    return points + 10 * k


def best_mask(matrices):
    """The mask (index into `matrices`, the symbol drawn with masks 0..7) of lowest
    penalty, ties to the lowest number, as npm qrcode and qr_core choose."""
    best = None
    for mask, matrix in enumerate(matrices):
        score = penalty(matrix)
        if best is None or score < best[0]:
            best = (score, mask)
    return best[1]
