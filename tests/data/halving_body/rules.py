"""The UDF's function, in a module of its own."""


def halve(x):
    return x // 2
