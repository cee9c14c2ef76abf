"""A throwaway study from outside the kit (issue #43); its record is in :mod:`toy_study.study`."""
