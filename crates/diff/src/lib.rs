//! Pure comparison of two HTTP responses: JSON structural diff by path, ignore rules, noise classification, route normalization.
