"""``.. cli-help:: COMMAND``: the ``dgl-zerocopy COMMAND --help`` text as a literal block.

The reference shows the parser's own help, so that a flag added to dgl_zerocopy/cli.py appears without a second
copy to keep in step. With no argument, the top-level help (the list of commands).
"""

from docutils import nodes
from docutils.parsers.rst import Directive


class CliHelp(Directive):
    optional_arguments = 1

    def run(self) -> list[nodes.Node]:
        import argparse

        from dgl_zerocopy.cli import _parser

        parser = _parser()
        if self.arguments:
            name = self.arguments[0]
            actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
            choices = actions[0].choices
            if name not in choices:
                raise self.error(f"cli-help: no command {name!r}; the commands are {', '.join(choices)}")
            parser = choices[name]
        text = parser.format_help()
        return [nodes.literal_block(text, text)]


def setup(app) -> dict:
    app.add_directive("cli-help", CliHelp)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
