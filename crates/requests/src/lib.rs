//! Request templates with {name} placeholders filled from data files (lines or CSV), in order or shuffled.
