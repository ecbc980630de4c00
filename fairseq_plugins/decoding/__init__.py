"""Sequence generators picked by ``FastTranslationTask.build_generator``."""
