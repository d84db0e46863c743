"""The project: the other Python files a linted file imports from, found the way Python would.

A rule that follows a value into `from samplers import pick_sampler` or
`from .engine import train_one_epoch` asks `model.project.resolve(name, model)`; the answer is
the other file's `SemanticModel` and the top-level definition the name denotes there, so the
flow model continues in that file exactly as it does in this one.

Resolution mirrors `sys.path` for a script run from its repository: the importing file's own
folder first (Python puts a script's folder first), then each folder above it up to the
project root (the first folder holding `.git`, `pyproject.toml`, `setup.py` or `setup.cfg`,
or the folder a run was started on). Relative imports resolve against the importer's package.
A name that no file of the project defines (torch, a third-party library, a module generated
at run time) resolves to None: the value leaves the project and rules say nothing about it.

Files are parsed lazily, only when a rule asks, and at most once per process; a helper file
that the token pre-filter would skip is still read here when a linted file imports from it.
The pre-filter reads, with a file's text, what it imports (`import_closure`) and, the other
way, the statements of the files importing it that hand values to what they import
(`importer_pieces`, from an index of every file's import lines: text only): a helper that
never names a wrapper is worth parsing when its caller passes it one.
Every file read for a linted file is recorded with its content hash (`dependencies`), so the
cache can tell when a finding must be recomputed because an imported file changed.
"""

from __future__ import annotations

import builtins
import copy
import itertools
import os
import re
import weakref
from typing import TYPE_CHECKING, Iterator, Optional

from dplint.source import SourceError, content_key, read_source, refused_by_every_python, scanned_text

if TYPE_CHECKING:  # LibCST is imported only when a file is really parsed (warm runs never are)
    import libcst as cst

    from dplint.semantic import SemanticModel

ROOT_MARKERS = (".git", "pyproject.toml", "setup.py", "setup.cfg")
MAX_LEVELS_UP = 8  # folders searched above the importer's own, at most
MAX_RE_EXPORTS = 8  # `from .x import y` chains followed through `__init__.py` files
MAX_FILE_BYTES = 2_000_000  # generated giants are not where training logic lives
MAX_MODELS = 256  # parsed files kept per process: a whole-repository run stays in bounded memory
# `from a.b import c, d` / `import a.b as x, e` at any indentation: what the pre-filter
# follows without parsing (a cheap over-approximation; resolution proper needs the parse).
_FROM_IMPORT = re.compile(r"^[ \t]*from[ \t]+(\.*[\w.]*)[ \t]+import[ \t]*(?:\(([^)]*)\)|([^\n#;]*))", re.M)
_IMPORT = re.compile(r"^[ \t]*import[ \t]+([\w. \t,]+)", re.M)
# Finding the callers of a function in the project's other files (`Project.callers`): every
# file is read as text once; only files naming the function are parsed, and only a few.
MAX_PROJECT_FILES = 20000  # beyond it, only a file's own calls are seen (as without a project)
MAX_CALLER_FILES = 12  # files naming a function, beyond which its callers stay unknown
# The reverse closure (`Project.importer_pieces`): who imports a file, read for the pre-filter.
MAX_INDEXED_FILES = 5000  # beyond it, a project's importers are not indexed (only its imports are read)
MAX_IMPORTERS = 12  # importing files read per file, nearest levels first (each costs a text scan)
SKIPPED_FOLDERS = {".git", ".hg", ".svn", ".tox", ".eggs", ".venv", "venv", "env", "node_modules", "site-packages",
                   "__pycache__", "build", "dist"}


class Project:
    """The files one run may resolve imports to; one instance per process and run."""

    def __init__(self, roots: tuple[str, ...] = ()) -> None:
        # Folders a run was started on: resolution never climbs above them.
        self.roots = tuple(os.path.abspath(root) for root in roots)
        self._models: dict[str, Optional[SemanticModel]] = {}
        self._model_texts: dict[str, str] = {}  # file -> the text its model in `_models` was built from
        self._hashes: dict[str, str] = {}
        self._found: dict[tuple[str, str], Optional[str]] = {}  # (folder, dotted module) -> file
        self._path_edits: dict[str, list[str]] = {}  # folder -> folders its scripts add to sys.path
        self._resolved: dict[tuple[str, str], Optional[tuple[SemanticModel, cst.CSTNode]]] = {}
        self._star_names: dict[tuple[str, str], Optional[str]] = {}  # (importer, name) -> qualified name
        self._reading: Optional[set[str]] = None  # files read while linting the current file
        self._closures: dict[tuple, dict[str, str]] = {}
        self._module_files: dict[tuple, tuple[str, ...]] = {}  # (importer's folder, module) -> its file
        self._imports_of_piece: dict[tuple, list] = {}  # (file, name) -> `_piece_imports`
        self._module_files_of: dict[tuple, tuple[str, ...]] = {}  # (importer's path, module) -> the same
        self._root_folders: dict[str, bool] = {}  # folder -> whether it holds a ROOT_MARKERS entry
        self._tree: dict[str, Optional[tuple[str, ...]]] = {}  # project root -> its .py files
        self._texts: dict[str, Optional[str]] = {}  # file -> text, read once (pre-filter, callers' pre-check)
        self._scans: dict[str, Optional[_ScannedText]] = {}
        self._callers: dict[tuple, Optional[list]] = {}
        self._importers: dict[str, dict[str, list[tuple[str, Optional[str]]]]] = {}  # root -> file -> (importer, name)
        self._importer_pieces: dict[str, dict[str, str]] = {}
        self._importing: dict[str, set[str]] = {}  # file -> `_files_importing`
        self._importers_of_target: dict[tuple, list] = {}  # (root, file) -> `_importers_of`, single-file runs
        self._mentioned: dict[tuple, bool] = {}  # (importer's folder, name, words, budget) -> answer
        self._file_imports: dict[str, tuple[str, list]] = {}  # file -> (its text, imported_definitions)
        self._function_texts: dict[str, FunctionTexts] = {}  # root -> its files' functions
        self._mentioning: dict[tuple, Optional[frozenset[str]]] = {}  # (root, word, depth) -> function names

    # ------------------------------------------------------------------- bookkeeping
    def register(self, model: SemanticModel, raw: Optional[bytes] = None, text: Optional[str] = None) -> None:
        """The file being linted: resolving back into it must give this very model (built
        from `text`, when given: a file linting reaches again reuses it)."""
        path = os.path.abspath(model.path)
        self._models.pop(path, None)
        self._models[path] = model  # the newest entry: kept longest
        self._model_texts.pop(path, None)
        if text is not None:
            self._model_texts[path] = text
        self._reading = {path}  # what linting it reads from now on (itself: kept while it is linted)
        self._forget_oldest()
        if raw is not None:
            self._hashes[path] = content_key(raw)
        model.project = self

    def parsed(self, path: str, text: str) -> Optional[SemanticModel]:
        """A model of `path` built from exactly `text` earlier in this process (the file was
        imported by one linted before it), for linting it without parsing it again; None if
        there is none. The copy shares the parsed tree and the tables collected from it, but not
        what analysis memoised on the model (that is keyed by the model object): linting it
        reads the project, and records what it read, as linting a fresh model would."""
        path_key = os.path.abspath(path)
        model = self._models.get(path_key)
        if model is None or self._model_texts.get(path_key) != text:
            return None
        from dplint.flow import Flow

        fresh = copy.copy(model)
        fresh.path = path
        fresh.flow = Flow(fresh)
        fresh._wrappings = None
        return fresh

    def current(self, model: SemanticModel) -> SemanticModel:
        """The model that now stands for `model`'s file: the fresh one `parsed` made of the same
        tree when the file was linted after another file's analysis reached it (memos made
        before then still hold the first), else `model` itself."""
        now = self._models.get(os.path.abspath(model.path))
        return now if now is not None and now is not model and now.module is model.module else model

    def dependencies(self, linted_path: str) -> dict[str, str]:
        """{path: content hash} of the other files read since `register` (for the cache)."""
        own = os.path.abspath(linted_path)
        return {path: self._hashes[path] for path in sorted(self._reading or ()) if path != own and path in self._hashes}

    def model_for(self, path: str) -> Optional[SemanticModel]:
        path = os.path.abspath(path)
        if self._reading is not None:
            self._reading.add(path)
        if path in self._models:
            return self._models[path]
        self._models[path] = None  # also guards against import cycles while it is built
        try:
            source = read_source(path)
        except SourceError:
            return None
        self._hashes[path] = content_key(source.raw)
        if len(source.raw) > MAX_FILE_BYTES:
            return None
        from dplint.fast_cst import parse_module
        from dplint.flow import analysed

        if refused_by_every_python(source.text) is not None:
            return None  # Python cannot run it (and LibCST may take gigabytes to parse it)
        try:
            module = parse_module(source.text)
        except Exception:  # a helper file that does not parse only hides what it defines
            return None
        try:
            model = analysed(module, path)
        except RecursionError:
            return None
        model.project = self
        model.text = scanned_text(source.text)
        self._models[path] = model
        self._model_texts[path] = source.text
        self._forget_oldest()
        return model

    def parse_shared_imports(self, files: list[tuple[str, str]]) -> list[str]:
        """Parse now those of `files` ((path, text) pairs, all to be linted) that two or more
        of them import, as their import closures tell, and return them, the most imported
        first: before a pool of workers forks, so that the workers inherit them instead of
        each parsing them again (a whole repository's central modules are imported by files
        in every worker). Only files to be linted anyway: a parse here is never one that no
        worker would have made."""
        linted = {os.path.abspath(path): text for path, text in files}
        importers: dict[str, int] = {}
        for path, text in files:
            for other in self.import_closure(path, text, importers=False):
                importers[other] = importers.get(other, 0) + 1
        shared = []
        for other, count in sorted(importers.items(), key=lambda item: (-item[1], item[0])):
            if count >= 2 and other in linted and len(self._models) < MAX_MODELS:
                self.model_for(other)  # a file changed since the run read it is parsed again when linted
                shared.append(other)
        self._reading = None
        return shared

    def _forget_oldest(self) -> None:
        """Drop the least recently parsed models beyond MAX_MODELS (they are parsed again if
        asked), except those the file being linted has read: its findings may point into them
        (`model_owning`), and a model parsed again would not own the nodes it was handed."""
        if len(self._models) <= MAX_MODELS:
            return
        in_use = self._reading or ()
        for path in [path for path in self._models if path not in in_use][: max(0, len(self._models) - MAX_MODELS)]:
            del self._models[path]
            self._model_texts.pop(path, None)
            for key in [k for k, v in self._resolved.items() if v is not None and os.path.abspath(v[0].path) == path]:
                del self._resolved[key]

    def model_owning(self, node: cst.CSTNode) -> Optional[SemanticModel]:
        """The loaded model whose tree holds `node` (a finding may point into another file)."""
        for model in self._models.values():
            if model is not None and owns(model, node):
                return model
        return None

    # ------------------------------------------------------------------- pre-filter
    def imported_definitions(self, path: str, text: str) -> Iterator[tuple[str, Optional[str]]]:
        """(project file, imported name) pairs of `text`, found without parsing: the name is
        None for `import pkg.mod as m`, whose used attributes (`m.build(...)`) are listed."""
        attributes = _AttributeIndex(text)
        for match in _FROM_IMPORT.finditer(text):
            module = match.group(1)
            listed = match.group(2) if match.group(2) is not None else match.group(3)
            names = [n.split()[0] for n in re.split(r"[,\\\n]", listed) if n.split()]
            for name in names:
                if name == "*":
                    for module_file in self._files_for_module(module, path):
                        yield module_file, None
                    continue
                submodule = f"{module}.{name}" if not module.endswith(".") else module + name
                found = False
                for module_file in self._files_for_module(submodule, path):  # `from pkg import mod`
                    found = True
                    for used in attributes.of(name):
                        yield module_file, used
                if not found:
                    for module_file in self._files_for_module(module, path):
                        yield module_file, name
        for match in _IMPORT.finditer(text):
            for part in match.group(1).split(","):
                words = part.split()
                if not words:
                    continue
                alias = words[2] if len(words) == 3 and words[1] == "as" else words[0]
                for module_file in self._files_for_module(words[0], path):
                    for used in attributes.of(alias):
                        yield module_file, used

    def _imports_of_file(self, path: str, text: str) -> list[tuple[str, Optional[str]]]:
        """`imported_definitions` of a whole project file's text, without repeats, read once
        per run (the importers' index and every callers' search read the same files)."""
        known = self._file_imports.get(path)
        if known is None or known[0] is not text and known[0] != text:
            known = self._file_imports[path] = (text, list(dict.fromkeys(self.imported_definitions(path, text))))
        return known[1]

    def import_closure(self, path: str, text: str, depth: int = 2, limit: int = 40, importers: bool = True) -> dict[str, str]:
        """{path: text} of what the file imports from the project, for the pre-filter: the
        source of each imported definition (not the whole module: a package's `__init__`
        names everything), and what those definitions import in turn, `depth` levels deep;
        with `importers`, also the blocks of the files importing it (`importer_pieces`).
        Memoised per file content (the runner and the engine both ask)."""
        text = scanned_text(text)
        key = (os.path.abspath(path), content_key(text.encode("utf-8", "surrogatepass")))
        if key not in self._closures:
            if len(self._closures) > 4 * MAX_MODELS:
                self._closures.clear()
            self._closures[key] = self._import_closure(path, text, depth, limit)
        closure = self._closures[key]
        if not importers:
            return closure
        pieces = self.importer_pieces(path)
        if not pieces:
            return closure
        both = dict(closure)
        for importer, piece in pieces.items():
            both[importer] = both[importer] + "\n" + piece if importer in both else piece
        return both

    def _import_closure(self, path: str, text: str, depth: int, limit: int) -> dict[str, str]:
        return self._forward_closure(path, text, depth, limit)

    def _forward_closure(self, path: str, text: str, depth: int, limit: int) -> dict[str, str]:
        found: dict[str, list[str]] = {}
        seen: set = set()
        own = os.path.abspath(path)
        frontier = [(own, self.imported_definitions(own, text), 0)]
        for _ in range(depth):
            following = []
            while frontier:
                importer, imported, re_exports = frontier.pop(0)
                for other, name in imported:
                    if len(seen) >= limit:
                        break
                    if (other, name) in seen or other == own:
                        continue
                    seen.add((other, name))
                    scanned = self._scanned(other)
                    if scanned is None:
                        continue
                    piece = scanned.text if name is None else scanned.definition(name)
                    re_export = piece is None
                    if re_export:
                        # Not defined there: a re-export (`from .x import name`), followed next.
                        piece = scanned.imports_naming(name)
                        if not piece:
                            continue
                    # The piece with the imports of the names it uses: `DDP(...)` means
                    # DistributedDataParallel by its file's `import ... as DDP`. Next level: only
                    # those imports. A re-export names the same definition, so following it
                    # costs no level (a package's `__init__` that re-exports its subpackage's).
                    imports = scanned.import_lines_used_by(name, piece)
                    found.setdefault(other, []).extend((*imports, piece))
                    if name is not None and not re_export:
                        # and the definitions of its own file that it names, next level: a class's
                        # base (its inherited methods), a helper it calls
                        following.append((other, [(other, used) for used in scanned.definitions_named_by(name, piece)], 0))
                    if imports:
                        entry = (other, self._piece_imports(other, name, imports, piece))
                        if re_export:  # the statement may re-export many: only this name goes on
                            entry = (other, [pair for pair in entry[1] if pair[1] == name])
                        if re_export and re_exports < MAX_RE_EXPORTS:
                            frontier.append((*entry, re_exports + 1))
                        else:
                            following.append((*entry, 0))
            frontier = following
        return {other: "\n".join(pieces) for other, pieces in found.items()}

    def _piece_imports(self, path: str, name: Optional[str], imports: list[str], piece: str) -> list:
        """`imported_definitions` of a file's part for `name` with the import lines it uses:
        the same for every file whose closure reaches it, so found once per run."""
        if (path, name) not in self._imports_of_piece:
            self._imports_of_piece[path, name] = list(self.imported_definitions(path, "\n".join(imports) + "\n" + piece))
        return self._imports_of_piece[path, name]

    def importer_pieces(self, path: str) -> dict[str, str]:
        """{importer: text} of the project files that import from this one, for the
        pre-filter: a helper that never spells `DataParallel` matters when a caller hands it
        the wrapper (`utils.save(model)` in train.py). Read from each importer: the top-level
        blocks naming what it imports from this file (all of its module-level script code
        when that does), and the blocks of the same file calling those definitions. Two
        levels: an importer's definitions that use the file are followed into their own
        importers, and so are a package `__init__`'s re-exports (`from tools import train`).
        Text only, from an index of every project file's imports built once per run."""
        own = os.path.abspath(path)
        if own not in self._importer_pieces:
            self._importer_pieces[own] = self._find_importer_pieces(own)
        return self._importer_pieces[own]

    def _find_importer_pieces(self, own: str) -> dict[str, str]:
        if not self._importers_of(own, own):
            return {}
        found: dict[str, list[str]] = {}
        frontier: list[tuple[str, Optional[set[str]]]] = [(own, None)]
        seen = {own}
        for _ in range(2):
            wanted: dict[str, set[str]] = {}
            for target, names in frontier:
                for importer, name in self._importers_of(own, target):
                    if importer in seen or (names is not None and name is not None and name not in names):
                        continue
                    if name is None:  # `from helpers import *`: whatever the file defines
                        scanned = self._scanned(target)
                        wanted.setdefault(importer, set()).update(scanned.top_level_names() if scanned else ())
                    else:
                        wanted.setdefault(importer, set()).add(name)
            frontier = []
            for importer in sorted(wanted)[: max(0, MAX_IMPORTERS - len(found))]:
                seen.add(importer)
                scanned = self._scanned(importer)
                if scanned is None:
                    continue
                piece, users = scanned.uses_of(wanted[importer])
                if piece:
                    found.setdefault(importer, []).append(piece)
                if os.path.basename(importer) == "__init__.py":
                    users |= wanted[importer]  # a package re-exports what it imports
                if users:
                    frontier.append((importer, users))
        return {importer: "\n".join(pieces) for importer, pieces in found.items()}

    def _importers_of(self, own: str, target: str) -> list[tuple[str, Optional[str]]]:
        """(importing file, imported name or None) for each import of `target` in the files of
        the project `own` belongs to. A folder run indexes every file once for all its files
        (`_importers_index`); a run on single files resolves the imports of only the files
        whose text names `target`'s module (an import of it always spells its last name)."""
        if self.roots:
            return self._importers_index(own).get(target, [])
        root, files = self._project_files(own)
        key = (root, target)
        if key not in self._importers_of_target:
            found: list[tuple[str, Optional[str]]] = []
            is_package = os.path.basename(target) == "__init__.py"
            stem = os.path.basename(os.path.dirname(target)) if is_package else os.path.basename(target)[:-3]
            # A module is imported by its name: a file whose stem is no identifier
            # (`my-script.py`, the root folder's `/__init__.py`) has no importer.
            importable = stem.isidentifier()
            naming = WholeWords((stem,)) if importable else None
            for path in files if importable and len(files) <= MAX_INDEXED_FILES else ():
                text = self._text(path)
                if path == target or text is None or "import" not in text or not naming.search(text):
                    continue
                if not self._scanned(path).imports_naming(stem):  # named, but by no import statement
                    continue
                found.extend((path, name) for module_file, name in self._imports_of_file(path, text) if module_file == target)
            self._importers_of_target[key] = found
        return self._importers_of_target[key]

    def _importers_index(self, own: str) -> dict[str, list[tuple[str, Optional[str]]]]:
        """{file: [(importing file, imported name or None)]} over the project `own` belongs
        to, from every file's import lines (`imported_definitions`); built once per run."""
        root, files = self._project_files(own)
        if root not in self._importers:
            index: dict[str, list[tuple[str, Optional[str]]]] = {}
            for path in files if len(files) <= MAX_INDEXED_FILES else ():
                text = self._text(path)
                if text is None or "import" not in text:
                    continue
                for module_file, name in self._imports_of_file(path, text):
                    if module_file != path:
                        index.setdefault(module_file, []).append((path, name))
            self._importers[root] = index
        return self._importers[root]

    def mentions(self, qualified_name: str, importer: SemanticModel, words: tuple[str, ...], budget: int = 4,
                 through_own_file: bool = False) -> bool:
        """Whether the source of the project definition an imported name denotes holds one of
        `words`, read as text without parsing: a rule looking for wrappers need not parse a
        module whose function never names one. Re-exports (`from .x import name` in a package's
        `__init__`) are followed; where the text cannot tell, the answer is True. With
        `through_own_file`, also the definitions of its file that it names (`save_model`
        calling `save_on_master`, whose body holds `torch.save`).
        Memoised per run: the answer depends only on the importer's folder (where the name
        resolves), the name and the project's texts, and rules ask it for every call."""
        key = (os.path.dirname(os.path.abspath(importer.path)), qualified_name, words, budget, through_own_file)
        if key not in self._mentioned:
            self._mentioned[key] = self._mentions(qualified_name, importer.path, words, budget, through_own_file)
        return self._mentioned[key]

    def _mentions(self, qualified_name: str, importer_path: str, words: tuple[str, ...], budget: int,
                  through_own_file: bool = False) -> bool:
        for module_file, attributes in self._candidates(qualified_name, importer_path):
            text = self._text(module_file)
            if text is None:
                return True
            if not attributes:
                return any(word in text for word in words)
            scanned = self._scanned(module_file)
            piece = scanned.definition(attributes[0])
            if piece is not None:
                named = scanned.definitions_named_by(attributes[0], piece) if through_own_file else ()
                return any(word in text for text in (piece, *map(scanned.definition, named)) if text
                           for word in words)
            for match in _FROM_IMPORT.finditer(text):
                listed = match.group(2) if match.group(2) is not None else match.group(3)
                names = {n.split()[-1]: n.split()[0] for n in re.split(r"[,\\\n]", listed) if n.split()}
                if attributes[0] in names and budget > 0:
                    module = match.group(1)
                    original = names[attributes[0]]
                    target = module + original if module.endswith(".") else f"{module}.{original}"
                    return self._mentions(".".join([target, *attributes[1:]]), module_file, words, budget - 1,
                                          through_own_file)
            return any(word in text for word in words)
        return False

    def _text(self, path: str) -> Optional[str]:
        """The file's text, read once per run (None: unreadable or too big)."""
        if path not in self._texts:
            text = None
            try:
                source = read_source(path)
            except SourceError:
                source = None
            if source is not None and len(source.raw) <= MAX_FILE_BYTES:
                self._hashes[path] = content_key(source.raw)
                text = scanned_text(source.text)
            self._texts[path] = text
        return self._texts[path]

    def functions_mentioning(self, path: str, word: str, depth: int = 2) -> Optional[frozenset[str]]:
        """The names of the project's functions whose text matches `word`, or calls (by name)
        one of those, `depth` calls up: which calls may reach, say, a `torch.save`. Text only,
        once per run and root; None when the project is too large to list (ask everything)."""
        if not self.roots:
            return None  # a run on single files: reading every project file would cost more than it saves
        root, files = self._project_files(os.path.abspath(path))
        key = (root, word, depth)
        if key not in self._mentioning:
            self._mentioning[key] = None
            if files:
                if root not in self._function_texts:
                    self._function_texts[root] = FunctionTexts(text for f in files if (text := self._text(f)) is not None)
                self._mentioning[key] = self._function_texts[root].mentioning(word, depth)
        return self._mentioning[key]

    def file_text(self, path: str) -> Optional[str]:
        """A project file's text, read once per run (None when it cannot be read)."""
        return self._text(path)

    def project_files(self, own: str) -> tuple[str, ...]:
        """The .py files of the project `own` belongs to (empty when it is too big to scan)."""
        return self._project_files(own)[1]

    def _scanned(self, path: str) -> Optional[_ScannedText]:
        """The file's text with its imports and top-level definitions found (once per run)."""
        if path not in self._scans:
            text = self._text(path)
            self._scans[path] = None if text is None else _ScannedText(text)
        return self._scans[path]

    def _files_for_module(self, name: str, importer_path: str) -> tuple[str, ...]:
        """The file of module `name` as the importer would find it (empty: not a project module)."""
        # Keyed by the importer's folder; the importer's path as given is a first key that
        # saves making that folder absolute (asked for every import of every file).
        known = self._module_files_of.get((importer_path, name))
        if known is not None:
            return known
        key = (os.path.dirname(os.path.abspath(importer_path)), name)
        if key not in self._module_files:
            found: tuple[str, ...] = ()
            if name.strip("."):
                for module_file, attributes in self._candidates(name, importer_path):
                    if attributes and os.path.basename(module_file) != "__init__.py":
                        # `a.py` for `a.b`: a module is no package, so this folder cannot be where
                        # the import, which runs, found it (a nearer `distributed_shampoo.py`
                        # beside the package `distributed_shampoo/`): the next folder may be
                        continue
                    if not attributes:
                        found = (os.path.abspath(module_file),)
                    break  # the nearest folder holding any prefix of it decides, as in Python
            self._module_files[key] = found
        self._module_files_of[importer_path, name] = self._module_files[key]
        return self._module_files[key]

    def hashes(self, paths) -> dict[str, str]:
        return {path: self._hashes[path] for path in paths if path in self._hashes}

    # ----------------------------------------------------------------------- callers
    def callers(self, model: SemanticModel, function: cst.FunctionDef) -> Optional[list[tuple[SemanticModel, cst.Call, bool]]]:
        """(model, call, bound) for each call, in the project's OTHER files, of a top-level
        function of `model`, of the constructor of a top-level class (`function` is its
        `__init__`) or of a method of one (`trainer.fit()` with `trainer = Trainer(...)`).

        Only files whose text names the function are parsed (at most MAX_CALLER_FILES), and a
        call counts when it resolves, the way the caller's imports say, to this very
        definition. None when the callers cannot all be seen: too many files name it, or a
        file uses it other than by calling it (a callback, `mp.spawn(main_worker)`, a base
        class). A nested function has no caller elsewhere: []. Memoised per definition."""
        target = _definition_path(model, function)
        if target is None:
            return []
        own = os.path.abspath(model.path)
        key = (own, target)
        if key not in self._callers:
            self._callers[key] = self._find_callers(own, target)
        found = self._callers[key]
        if found and self._reading is not None:
            self._reading.update(os.path.abspath(other.path) for other, _, _ in found)
        return found

    def _find_callers(self, own: str, target: tuple[str, ...]) -> Optional[list]:
        name = target[0] if len(target) == 1 or target[1] == "__init__" else target[1]
        files = self._files_naming(own, target[:1] if name == target[0] else target)
        if len(files) > MAX_CALLER_FILES:
            return None
        found: list = []
        for path in files:
            other = self.model_for(path)
            if other is None:
                continue  # a file that does not parse cannot run either
            calls = _calls_of(other, own, target, name)
            if calls is None:
                return None
            found.extend(calls)
        return found

    def _files_naming(self, own: str, words: tuple[str, ...]) -> list[str]:
        """The project's other .py files whose text holds every word (the last as a whole
        word) and an import that may reach `own`: one naming its module or a package above
        it, or a relative one. Empty when the project is too big to scan."""
        root, files = self._project_files(own)
        last = WholeWords(words[-1:])
        parts = [p for p in os.path.relpath(own, root)[:-3].split(os.sep) if p and p != "__init__"]
        importing = re.compile(
            r"^[ \t]*(?:from[ \t]+\.|(?:from|import)[ \t][^\n]*\b(?:" + "|".join(map(re.escape, parts)) + r")\b)", re.M
        )
        reaching = self._files_importing(own, root, files)
        found = []
        for path in files:
            if path == own or reaching is not None and path not in reaching:
                continue
            text = self._text(path)
            if (text is not None and all(word in text for word in words) and importing.search(text)
                    and _names_it(text, last, parts if len(words) == 1 else None)
                    and (reaching is not None or self._may_reach(path, text, own))):  # the index already said
                found.append(path)
        return found

    def _files_importing(self, own: str, root: str, files: tuple[str, ...]) -> Optional[set[str]]:
        """The files `_may_reach` can accept for `own`, from the importers' index (those
        importing `own` or a package `__init__` above it): a project's other files need not
        be read for each function whose callers are looked for. None when not indexed."""
        if len(files) > MAX_INDEXED_FILES:
            return None
        own = os.path.abspath(own)
        if own not in self._importing:
            found = {importer for importer, _ in self._importers_of(own, own)}
            # The packages above `own` up to the project root: a package outside the project
            # has no importer among its files (and `/__init__.py` names no module at all).
            for folder in self._search_folders(os.path.dirname(own)):
                if os.path.isfile(os.path.join(folder, "__init__.py")):
                    found.update(importer for importer, _ in self._importers_of(own, os.path.join(folder, "__init__.py")))
                if folder == root:
                    break
            self._importing[own] = found
        return self._importing[own]

    def _may_reach(self, path: str, text: str, own: str) -> bool:
        """Whether an import of `text` resolves to `own` or to a package `__init__` above it
        (a re-export): a file that only shares a module's name (each sub-project's own
        `utils/data_utils.py`) or has some relative import elsewhere cannot call into `own`."""
        own = os.path.abspath(own)
        for module_file, _ in self._imports_of_file(path, text):
            if module_file == own:
                return True
            if os.path.basename(module_file) == "__init__.py" and own.startswith(os.path.dirname(module_file) + os.sep):
                return True
        return False

    def _project_files(self, own: str) -> tuple[str, tuple[str, ...]]:
        """(root, its .py files): the project root above `own` (a folder a run started on or
        holding a root marker), else `own`'s folder."""
        folders = list(self._search_folders(os.path.dirname(own)))
        root = folders[-1]
        if root not in self.roots and not self._is_root_folder(root):
            root = folders[0]
        if root not in self._tree:
            files: list[str] = []
            for folder, subfolders, names in os.walk(root):
                subfolders[:] = sorted(d for d in subfolders if d not in SKIPPED_FOLDERS and not d.startswith("."))
                files.extend(os.path.join(folder, n) for n in sorted(names) if n.endswith(".py"))
                if len(files) > MAX_PROJECT_FILES:
                    break
            self._tree[root] = tuple(files) if len(files) <= MAX_PROJECT_FILES else ()
        return root, self._tree[root]

    # -------------------------------------------------------------------- resolution
    def resolve(self, qualified_name: str, importer: SemanticModel) -> Optional[tuple[SemanticModel, cst.CSTNode]]:
        """The model and top-level definition (FunctionDef, ClassDef or the binding statement)
        that an imported dotted name denotes, or None when no project file defines it."""
        if not qualified_name:
            return None
        key = (os.path.abspath(importer.path), qualified_name)
        if key not in self._resolved:
            self._resolved[key] = None  # cycles resolve to None
            self._resolved[key] = self._resolve(qualified_name, importer, MAX_RE_EXPORTS)
        found = self._resolved[key]
        if found is not None and self._reading is not None:
            self._reading.add(os.path.abspath(found[0].path))
        return found

    def star_imported(self, name: str, importer: SemanticModel) -> Optional[str]:
        """The qualified name (`tools.keep`) that `name`, which the importer's file binds
        nowhere, takes from its `from tools import *` of a project module: the last such
        import whose module exports it (the names of a literal `__all__`, else its public
        names) and defines it there or through its own imports. A star import of a module
        outside the project cannot be read: it is taken to export nothing, so it neither
        hides an explicit import nor names anything. None when no project star import gives it."""
        stars = [*importer.star_imports, *importer.relative_star_imports]
        if not stars or name in importer.bindings or hasattr(builtins, name):
            return None
        key = (os.path.abspath(importer.path), name)
        if key not in self._star_names:
            self._star_names[key] = None  # a module that star-imports itself gives nothing
            for module in reversed(stars):
                qualified = module + name if module.endswith(".") else f"{module}.{name}"
                if self._exports(module, name, importer) and self.resolve(qualified, importer) is not None:
                    self._star_names[key] = qualified
                    break
        return self._star_names[key]

    def _exports(self, module: str, name: str, importer: SemanticModel) -> bool:
        """Whether `from module import *` binds `name`, as Python decides: the module's
        `__all__` when it is a literal list or tuple, else every name not starting with `_`."""
        for module_file, rest in self._candidates(module, importer.path):
            other = None if rest else self.model_for(module_file)
            if other is None:
                return False
            listed = _literal_all(other)
            return name in listed if listed is not None else not name.startswith("_")
        return False

    def _resolve(self, name: str, importer: SemanticModel, budget: int) -> Optional[tuple[SemanticModel, cst.CSTNode]]:
        for module_file, attributes in self._candidates(name, importer.path):
            model = self.model_for(module_file)
            if model is None:
                continue
            if not attributes:
                # The name is a module itself, unless its package's `__init__` rebinds it
                # (`from .train_validate_test import train_validate_test`): then that wins.
                return self._rebound_by_package(name, importer, budget)
            found = self._definition(model, attributes, budget)
            if found is not None:
                return found
        return None

    def _rebound_by_package(self, name: str, importer: SemanticModel, budget: int) -> Optional[tuple[SemanticModel, cst.CSTNode]]:
        head, _, last = name.rpartition(".")
        if not head.strip(".") or budget <= 0:
            return None
        for package_file, rest in self._candidates(head, importer.path):
            if not rest and os.path.basename(package_file) == "__init__.py":
                package = self.model_for(package_file)
                if package is not None and last in package.imports:
                    return self._definition(package, [last], budget - 1)
            break
        return None

    def _definition(self, model: SemanticModel, attributes: list[str], budget: int) -> Optional[tuple[SemanticModel, cst.CSTNode]]:
        """`attributes[0]` at the top level of `model` (following its own imports)."""
        first, rest = attributes[0], attributes[1:]
        node = top_level_definition(model, first)
        if node is not None:
            if not rest:
                return model, node
            if type(node).__name__ == "ClassDef":
                return _class_member(model, node, rest)
            return None
        imported = model.imports.get(first)
        if budget <= 0:
            return None
        if imported is None:
            # a package's `from .ema import *` re-exports what that module defines
            for module in (*model.star_imports, *model.relative_star_imports):
                separator = "" if module.endswith(".") else "."
                found = self._resolve(module + separator + ".".join(attributes), model, budget - 1)
                if found is not None:
                    return found
            return None
        dotted = imported + ("." + ".".join(rest) if rest else "")
        return self._resolve(dotted, model, budget - 1)

    def _candidates(self, name: str, importer_path: str):
        """(file, remaining attributes) pairs for `name`, nearest folder first."""
        parts = name.split(".")
        importer_dir = os.path.dirname(os.path.abspath(importer_path))
        if name.startswith("."):
            dots = len(name) - len(name.lstrip("."))
            base = importer_dir
            for _ in range(dots - 1):
                base = os.path.dirname(base)
            if not _inside(base, self._top_folder(importer_dir)):
                return  # above the project (Python: "attempted relative import beyond top-level package")
            bases = [base]
            parts = name[dots:].split(".") if name[dots:] else []
        else:
            bases = list(self._search_folders(importer_dir))
        for base in itertools.chain(bases, () if name.startswith(".") else self._added_folders(importer_dir, bases)):
            for cut in range(len(parts), 0, -1):
                module_file = self._module_file(base, parts[:cut])
                if module_file is not None:
                    yield module_file, parts[cut:]
                    break  # a deeper module shadows its package's attributes

    def _added_folders(self, folder: str, searched: list[str]) -> Iterator[str]:
        """Last, the folders this folder's scripts put on `sys.path` (`import _init_paths`),
        read only when the usual folders hold no part of the name (a generator: lazy)."""
        yield from (added for added in self._path_edit_folders(folder) if added not in searched)

    def _path_edit_folders(self, folder: str) -> list[str]:
        """The folders that the scripts of `folder` add to `sys.path` relative to their own
        file (`sys.path.insert(0, osp.join(osp.dirname(__file__), "..", "lib"))`, often in an
        `_init_paths.py` they import), read from the text of those that mention `sys.path`."""
        if folder not in self._path_edits:
            found: list[str] = []
            try:
                names = sorted(n for n in os.listdir(folder) if n.endswith(".py"))
            except OSError:
                names = []
            top = self._top_folder(folder)
            for name in names:
                path = os.path.join(folder, name)
                text = self._text(path)
                if text is not None and "sys.path" in text:  # the project's own folders only
                    found.extend(f for f in path_edit_folders(path, text) if f not in found and _inside(f, top))
            self._path_edits[folder] = found
        return self._path_edits[folder]

    def _search_folders(self, start: str):
        folder = start
        for _ in range(MAX_LEVELS_UP + 1):
            yield folder
            if folder in self.roots or self._is_root_folder(folder):
                return
            parent = os.path.dirname(folder)
            if parent == folder:
                return
            folder = parent

    def _top_folder(self, folder: str) -> str:
        """The highest folder imports from `folder` are looked up in: the project's root."""
        for top in self._search_folders(folder):
            pass
        return top

    def _is_root_folder(self, folder: str) -> bool:
        if folder not in self._root_folders:
            self._root_folders[folder] = any(os.path.exists(os.path.join(folder, marker)) for marker in ROOT_MARKERS)
        return self._root_folders[folder]

    def _module_file(self, base: str, parts: list[str]) -> Optional[str]:
        key = (base, ".".join(parts))
        if key not in self._found:
            stem = os.path.join(base, *parts)
            found = None
            for candidate in (stem + ".py", os.path.join(stem, "__init__.py")):
                if os.path.isfile(candidate):
                    found = candidate
                    break
            self._found[key] = found
        return self._found[key]


_PATH_STRING = re.compile(r"""(?<!\w)[rRuU]?(['"])([\w./\\-]+)\1""")


def path_edit_folders(path: str, text: str) -> list[str]:
    """Existing folders that the statements of `text` build from the file's own folder and
    string parts (`osp.join(osp.dirname(__file__), "..", "lib")`, `Path(__file__).parent / "src"`,
    `sys.path.append("../lib")`): where a script that edits `sys.path` finds its imports. Text
    only: each line with a path join or a `sys.path` edit is read as its folder's path."""
    here = os.path.dirname(os.path.abspath(path))
    found: list[str] = []
    for line in text.splitlines():
        statement = line.split("#", 1)[0]
        if "join(" not in statement and "sys.path" not in statement and " / " not in statement:
            continue
        parts = [match.group(2) for match in _PATH_STRING.finditer(statement)]
        if not parts:
            continue
        ups = 0
        if "__file__" in statement:  # the first `dirname`/`.parent` is the file's own folder
            ups = max(statement.count("dirname(") + len(re.findall(r"\.parent\b", statement)) - 1, 0)
        base = here
        for _ in range(ups):
            base = os.path.dirname(base)
        folder = os.path.normpath(os.path.join(base, *parts))
        if folder != here and folder not in found and os.path.isdir(folder):
            found.append(folder)
    return found


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


_WORD = re.compile(r"\w+")


class WholeWords:
    """Where identifiers occur as whole words: `re.compile(r"\b(?:name|other)\b")`'s matches,
    as (start, end) spans, without a regular expression. A pattern that starts with `\b` is
    tried at every position of the text (some forty times slower on a big file than a plain
    search), and compiling one for each new set of names cost more still; `str.find` needs
    neither. Two names never match at one place: each match is a whole word."""

    def __init__(self, names) -> None:
        # Only identifiers are searched: `\b` on both sides means "whole word" only for a word,
        # the empty name would match everywhere (and `str.find("")` never advances), and a name
        # that is no identifier (`epoch):`, read off a line by a loose pattern) is never one that
        # an import or a call spells.
        self.names = tuple(sorted({name for name in names if name.isidentifier()}))

    def spans(self, text: str) -> list[tuple[int, int]]:
        found = [span for name in self.names for span in _whole_word_spans(text, name)]
        if len(self.names) > 1:
            found.sort()
        return found

    def search(self, text: str) -> Optional[tuple[int, int]]:
        """The first span, or None; each name is looked for only up to its first match."""
        firsts = [span for span in (next(_whole_word_spans(text, name), None) for name in self.names) if span]
        return min(firsts) if firsts else None


def _whole_word_spans(text: str, name: str) -> Iterator[tuple[int, int]]:
    if not name:
        return  # `str.find("")` matches everywhere and never advances
    start = text.find(name)
    while start >= 0:
        end = start + len(name)
        if (not start or not _is_word_character(text[start - 1])) \
                and (end == len(text) or not _is_word_character(text[end])):
            yield start, end
        start = text.find(name, end)  # end > start: each search starts further on


def _is_word_character(character: str) -> bool:
    return character.isalnum() or character == "_"  # what `\w` matches
_CALLED = re.compile(r"\b(\w+)\s*\(")  # `\b`: tried at word starts only (the same matches, found faster)
_BLOCK = re.compile(r"^([ \t]*)(?:async[ \t]+)?(def|class)[ \t]+(\w+)", re.M)


_MATCHING: "weakref.WeakKeyDictionary[SemanticModel, dict]" = weakref.WeakKeyDictionary()  # -> {(pattern, depth): names}


def may_call_function_matching(model: "SemanticModel", func, pattern: str, depth: int = 2) -> bool:
    """Whether a call of `func` (`save_checkpoint`, `self.saver.dump`, `make_model` imported
    under another name, an instance's `__call__`) may run, by its name, one of the functions
    of the project (of the file, without one) whose text matches `pattern`, or that call one
    of those, `depth` calls deep (`functions_mentioning`). Text only: a rule asks this before
    resolving a callee, and a near-miss costs a resolution, never a finding."""
    import libcst as cst

    known = _MATCHING.setdefault(model, {})
    if (pattern, depth) not in known:
        project = getattr(model, "project", None)
        if project is None:
            names = functions_mentioning((model.text,), pattern, depth)
        else:  # None: a project too large to list, or one that cannot: ask everything
            lister = getattr(project, "functions_mentioning", None)
            names = lister(model.path, pattern, depth) if lister is not None else None
        known[pattern, depth] = names
    names = known[pattern, depth]
    if names is None:
        return True
    if isinstance(func, cst.Attribute):
        return func.attr.value in names
    if isinstance(func, cst.Name):
        imported = model.imports.get(func.value)
        name = imported.rsplit(".", 1)[-1] if imported else func.value
        return name in names or "__call__" in names
    return True


def functions_mentioning(texts, word: str, depth: int = 2) -> frozenset[str]:
    """`Project.functions_mentioning` over some files' texts: `word` is a regular expression.
    In a file that binds another name to what it matches (`import ... DistributedDataParallel
    as Wrapper`, `save_fn = torch.save`), a call of that name matches too."""
    return FunctionTexts(texts).mentioning(word, depth)


class FunctionTexts:
    """The functions of some files' texts (`function_texts`), each with the names it calls,
    split once: a run asks `mentioning` for several words over the same project."""

    def __init__(self, texts) -> None:
        self.files: list[tuple[str, list[tuple[str, str]]]] = [(text, list(function_texts(text))) for text in texts]
        self._calls: Optional[list[tuple[str, set[str]]]] = None

    def mentioning(self, word: str, depth: int = 2) -> frozenset[str]:
        pattern = re.compile(word)
        # A file without the word's letters (`save` for `save\s*\(`) can neither match nor alias it.
        plain = re.compile(word.replace("\\(", "").replace("\\s*", ""))
        found: set[str] = set()
        for text, functions in self.files:
            if not functions or not plain.search(text):
                continue
            aliases = _aliases_in(text, word, plain)
            matches = re.compile("|".join([word, *(rf"\b{a}\s*\(" for a in aliases)])) if aliases else pattern
            found.update(name for name, body in functions if matches.search(body))
        if self._calls is None:
            self._calls = [(name, set(_CALLED.findall(body, body.index("(") + 1)))
                           for _, functions in self.files for name, body in functions]
        calls = [(name, called) for name, called in self._calls if name not in found]
        for _ in range(depth):
            more = {name for name, called in calls if name not in found and not found.isdisjoint(called)}
            if not more:
                break
            found |= more
        return frozenset(found)


def _aliases_in(text: str, word: str, plain: re.Pattern) -> set[str]:
    """The names `_aliases_of(word)` finds in `text`, read only on the lines where the word's
    letters show (both of its forms are one line; a whole-text search costs a regex attempt
    at every word)."""
    aliases = _aliases_of(word)
    found: set[str] = set()
    end = -1
    for match in plain.finditer(text):
        if match.start() < end:
            continue  # on a line already read
        start = text.rfind("\n", 0, match.start()) + 1
        end = text.find("\n", match.end())
        end = len(text) if end < 0 else end
        found.update(m.group(1) or m.group(2) for m in aliases.finditer(text, start, end))
    return found - {None}


def _aliases_of(word: str) -> re.Pattern:
    """`... import X as name` and `name = a.X` where X matches `word` (its words, `(` dropped)."""
    plain = word.replace("\\(", "").replace("\\s*", "")
    return re.compile(rf"\b\w*(?:{plain})\w*[ \t]+as[ \t]+(\w+)|^[ \t]*(\w+)[ \t]*=[ \t]*[\w.]*(?:{plain})\w*[ \t]*$", re.M)


def function_texts(text: str) -> Iterator[tuple[str, str]]:
    """(name, text) of each `def` in a file's text, found without parsing: from the `def` to the
    next `def` or `class` indented no deeper (nested ones stay inside; a body may run on past
    its end, into top-level code after it, but never stops short of it)."""
    blocks = list(_BLOCK.finditer(text))
    for index, match in enumerate(blocks):
        if match.group(2) != "def":
            continue
        indent = len(match.group(1).expandtabs())
        end = next((m.start() for m in blocks[index + 1:] if len(m.group(1).expandtabs()) <= indent), len(text))
        yield match.group(3), text[match.start():end]

# A top-level `def name` / `class name` / `name = ...` / `name: ...`: what `_definition_text` looks for.
_TOP_LEVEL_DEFINITION = re.compile(r"^(?:async[ \t]+)?(?:def|class)[ \t]+(\w+)|^(\w+)[ \t]*[:=]", re.M)
_NEXT_TOP_LEVEL = re.compile(r"^[^\s#@)\]}]", re.M)
_DEFINITION_HEADER = re.compile(r"(?:@[^\n]*\n)*(?:async[ \t]+)?(?:def|class)[ \t]+(\w+)")
_IMPORT_STATEMENT = re.compile(r"(?:from[ \t]+[\w.]+[ \t]+)?import[ \t]")


class _ScannedText:
    """One file's text as the pre-filter reads it, each part found once: its import lines and
    where each top-level definition starts (`_definition_text` and `_import_lines`, memoised)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self._imports: Optional[list[str]] = None
        self._import_words: Optional[list[tuple[str, set[str]]]] = None
        self._starts: Optional[dict[str, tuple[int, int]]] = None
        self._definitions: dict[str, Optional[str]] = {}
        self._blocks: Optional[list[tuple[str, Optional[str]]]] = None
        self._naming_imports: dict[str, str] = {}
        self._imports_used_by: dict[Optional[str], list[str]] = {}
        self._piece_words: dict[Optional[str], set[str]] = {}
        self._definitions_named: dict[str, list[str]] = {}
        self._code: Optional[tuple[list, str]] = None
        self._assignment_index: dict[str, _Assignments] = {}  # block -> its assignment lines

    def definition(self, name: str) -> Optional[str]:
        """`_definition_text(self.text, name)`."""
        if name not in self._definitions:
            if not name.isidentifier():
                self._definitions[name] = _definition_text(self.text, name)
            else:
                if self._starts is None:
                    self._starts = {}
                    for match in _TOP_LEVEL_DEFINITION.finditer(self.text):
                        self._starts.setdefault(match.group(1) or match.group(2), match.span())
                span = self._starts.get(name)
                piece = None
                if span is not None:
                    following = _NEXT_TOP_LEVEL.search(self.text, span[1])
                    piece = self.text[span[0]: following.start() if following else len(self.text)]
                self._definitions[name] = piece
        return self._definitions[name]

    def definitions_named_by(self, name: str, piece: str) -> list[str]:
        """The file's other top-level `def`s and `class`es that `piece`, the definition of
        `name`, names (the same piece each time one is asked, as in `import_lines_used_by`)."""
        if name not in self._definitions_named:
            words = self._words_of(name, piece)
            self._definitions_named[name] = [other for other in sorted(self.top_level_names() & words)
                                             if other != name and _DEFINITION_HEADER.match(self.definition(other) or "")]
        return self._definitions_named[name]

    def _words_of(self, name: Optional[str], piece: str) -> set[str]:
        """The words of the file's part for `name`, found once."""
        if name not in self._piece_words:
            self._piece_words[name] = set(_WORD.findall(piece))
        return self._piece_words[name]

    def top_level_names(self) -> set[str]:
        """The names of the file's top-level definitions and assignments."""
        self.definition("_")  # fills `_starts`
        return set(self._starts or ())

    def _segments(self) -> list[tuple[str, Optional[str]]]:
        """The file cut at its top-level statements: (text, name of the def or class or None)."""
        if self._blocks is None:
            starts = [m.start() for m in _NEXT_TOP_LEVEL.finditer(self.text)]
            if not starts or starts[0] != 0:
                starts.insert(0, 0)
            self._blocks = []
            for start, end in zip(starts, [*starts[1:], len(self.text)]):
                block = self.text[start:end]
                header = _DEFINITION_HEADER.match(block)
                self._blocks.append((block, header.group(1) if header else None))
        return self._blocks

    def uses_of(self, names: set[str]) -> tuple[str, set[str]]:
        """(text, definitions): the statements outside import lines that use one of `names`
        (`store(net, path)`, to where its brackets close) and, in the same top-level block,
        the assignments of the names those statements pass (`net = DataParallel(net)`); then
        the same for the calls, in this file, of the definitions holding them (a `fit(net)`
        whose `net` `main()` wraps). The names of those top-level definitions."""
        if not names:
            return "", set()
        segments, script = self._code_segments()
        found: list[str] = []
        users: set[str] = set()
        wanted = set(names)
        for _ in range(2):
            naming = WholeWords(wanted)
            holders = set()
            for block, holder, words in segments:
                if holder in wanted or wanted.isdisjoint(words):
                    continue
                statements = _statements_naming(block, naming)
                if not statements:
                    continue
                passed = _passed_names(statements, naming) - wanted
                # and the names they bind: `trainer = Trainer(...)` then `trainer.model = DDP(...)`
                # stores into the instance what the class's methods read as `self.model`
                bound = {word for statement in statements for word in _WORD.findall(_assigned_part(statement) or "")}
                found.extend(statements)
                assignments = self._assignments_in(block if holder else script)
                found.extend(line for line in assignments.of(passed | (bound - wanted)) if line not in statements)
                if holder is not None:
                    holders.add(holder)
            users |= holders
            wanted = holders - set(names)
            if not wanted:
                break
        if found:
            # The import lines naming what those statements use: `DDP(model)` is a wrapper
            # only through `from torch.nn.parallel import DistributedDataParallel as DDP`.
            found.extend(line + "\n" for line in self.import_lines_using(set(_WORD.findall("".join(found)))))
        return "".join(found), users

    def _code_segments(self) -> tuple[list[tuple[str, Optional[str], set[str]]], str]:
        """The `_segments` that are not import lines, each with its set of words, and the
        module-level code among them joined (what `uses_of` reads, for every file it asks)."""
        if self._code is None:
            segments = [(block, name, set(_WORD.findall(block)))
                        for block, name in self._segments() if not _IMPORT_STATEMENT.match(block)]
            self._code = segments, "".join(block for block, holder, _ in segments if holder is None)
        return self._code

    def _assignments_in(self, block: str) -> "_Assignments":
        if block not in self._assignment_index:
            self._assignment_index[block] = _Assignments(block)
        return self._assignment_index[block]

    def _import_statements(self) -> list[str]:
        if self._imports is None:
            self._imports = [m.group(0) for m in _FROM_IMPORT.finditer(self.text)] + [m.group(0) for m in _IMPORT.finditer(self.text)]
        return self._imports

    def imports_naming(self, name: str) -> str:
        """`_import_lines(self.text, name)`."""
        if name not in self._naming_imports:
            naming = WholeWords((name,))
            self._naming_imports[name] = "\n".join(line for line in self._import_statements() if naming.search(line))
        return self._naming_imports[name]

    def import_lines_used_by(self, name: Optional[str], piece: str) -> list[str]:
        """`import_lines_using` the words of `piece`, the file's part for `name` (the same
        piece each time one is asked: its definition, its re-export or, for None, the file)."""
        if name not in self._imports_used_by:
            self._imports_used_by[name] = self.import_lines_using(self._words_of(name, piece))
        return self._imports_used_by[name]

    def import_lines_using(self, used: set[str]) -> list[str]:
        """The import statements (whole: `from .parallel import (\n a, b\n)` is one) that
        name one of `used`, the keywords of the statements left out."""
        if self._import_words is None:
            self._import_words = [(statement, set(_WORD.findall(statement)) - _IMPORT_KEYWORDS)
                                  for statement in self._import_statements()]
        return [statement for statement, words in self._import_words if not used.isdisjoint(words)]


_IMPORT_KEYWORDS = frozenset(("from", "import", "as"))


def _statements_naming(block: str, naming: WholeWords) -> list[str]:
    """The lines of `block` that match `naming`, each with the lines that follow it until
    its brackets close (a call spread over lines), at most 12 lines each."""
    found: list[str] = []
    end = 0
    for use_start, use_end in naming.spans(block):  # only the lines naming one
        if use_start < end:
            continue  # on a line already taken
        start = block.rfind("\n", 0, use_start) + 1
        end = block.find("\n", use_end)
        end = len(block) if end < 0 else end + 1
        line = block[start:end]
        if line.lstrip().startswith(("def ", "async def ", "class ", "#")):
            continue
        depth = _depth(line)
        lines = 1
        while depth > 0 and end < len(block) and lines < 12:
            following = block.find("\n", end)
            following = len(block) if following < 0 else following + 1
            depth += _depth(block[end:following])
            end = following
            lines += 1
        found.append(block[start:end])
    return found


_DOTTED = re.compile(r"(?<![\w.])([A-Za-z_]\w*)(?:\.(\w+))?[\w.]*(?:[ \t]*(=)(?!=))?")


def _passed_names(statements: list[str], naming: WholeWords) -> set[str]:
    """The names the statements pass on, read after the name they use: `net` and `trainer`
    in `store(net, trainer.cfg, path=self.target)` (`target` for `self.target`), not the
    attributes read off them nor keyword names."""
    found: set[str] = set()
    for statement in statements:
        use = naming.search(statement)
        for match in _DOTTED.finditer(statement, use[1] if use else 0):
            base, attribute, keyword = match.groups()
            if keyword:
                continue
            found.add(attribute if base in ("self", "cls") and attribute else base)
    return found


def _depth(line: str) -> int:
    return sum(line.count(c) for c in "([{") - sum(line.count(c) for c in ")]}")


class _Assignments:
    """The lines of a block that assign (`x = ...`, `a, x = ...`, `self.x = ...`), each with
    the words of what it assigns to, found in one pass: `of(names)` gives those assigning one
    of `names`, for any names."""

    def __init__(self, block: str) -> None:
        self.lines: list[tuple[str, set[str]]] = []
        start = 0
        while start < len(block):
            end = block.find("\n", start)
            end = len(block) if end < 0 else end + 1
            line = block[start:end]
            target = _assigned_part(line) if "=" in line else None
            if target is not None:
                self.lines.append((line, set(_WORD.findall(target))))
            start = end

    def of(self, names: set[str]) -> list[str]:
        names = names - _EVERYWHERE
        return [line for line, words in self.lines if not names.isdisjoint(words)] if names else []


# Words in nearly every statement: what a call passes through them is found by its other words.
_EVERYWHERE = {"self", "cls", "None", "True", "False"}


def _assigned_part(line: str) -> Optional[str]:
    """What `line` assigns to (the text before its `=`, `+=`, ...), None when it assigns nothing."""
    at = line.find("=")
    while at > 0:
        if line[at + 1:at + 2] == "=" or line[at - 1] in "=!<>":
            at = line.find("=", at + 2)
            continue
        target = line[:at]
        return target if _depth(target) == 0 and "#" not in target else None
    return None


def _attributes_used(text: str, alias: str) -> set[str]:
    """`m.build`, `m.data.make` -> {"build", "data"} for `import pkg.mod as m`."""
    return set(re.findall(r"(?<![\w.])" + re.escape(alias) + r"\.(\w+)", text))


_NAME_DOT_ATTRIBUTE = re.compile(r"(?<![\w.])(\w+)\.(\w+)")


class _AttributeIndex:
    """`_attributes_used` for every plain name of one text, from a single pass made on first
    use (a file importing twenty modules is read once, not twenty times)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self._by_name: Optional[dict[str, set[str]]] = None

    def of(self, alias: str) -> list[str]:
        """Sorted: the closure's limits keep the first ones, the same in every run."""
        if "." in alias:  # `import a.b`: `a.b.x`, rare enough to search for
            return sorted(_attributes_used(self.text, alias))
        if self._by_name is None:
            self._by_name = {}
            for name, attribute in _NAME_DOT_ATTRIBUTE.findall(self.text):
                self._by_name.setdefault(name, set()).add(attribute)
        return sorted(self._by_name.get(alias, ()))


def _definition_text(text: str, name: str) -> Optional[str]:
    """The source of a top-level `def name` / `class name` / `name = ...` (to the next
    top-level statement), or None."""
    match = re.search(
        r"^(?:async[ \t]+)?(?:def|class)[ \t]+" + re.escape(name) + r"\b|^" + re.escape(name) + r"[ \t]*[:=]", text, re.M
    )
    if match is None:
        return None
    following = re.compile(r"^[^\s#@)\]}]", re.M).search(text, match.end())
    return text[match.start(): following.start() if following else len(text)]


def _import_lines(text: str, name: Optional[str] = None) -> str:
    """The module's import statements (those naming `name`, when given)."""
    lines = [m.group(0) for m in _FROM_IMPORT.finditer(text)] + [m.group(0) for m in _IMPORT.finditer(text)]
    if name is not None:
        naming = WholeWords((name,))
        lines = [line for line in lines if naming.search(line)]
    return "\n".join(lines)


def _names_it(text: str, name: WholeWords, modules: Optional[list[str]]) -> bool:
    """Whether `text` uses the name other than by defining its own: with `modules` (a
    top-level function or class), `x.name` counts only where `x` is one of the module
    names (`engine.train_one_epoch`), so that `model.train()` is not `train`."""
    if modules is not None:  # `import distributed as dist` then `dist.data_sampler(...)`
        modules = [*modules, *re.findall(r"^[ \t]*(?:from|import)[ \t][^\n#]*\bas[ \t]+(\w+)", text, re.M)]
    for start, end in name.spans(text):
        before = text[max(0, start - 64):start]
        if before.endswith(("def ", "class ", "'", '"')) or text[end:end + 1] in ("'", '"'):
            continue  # its own definition, or a string such as a dict key
        if modules is not None and before.endswith("."):
            owner = re.search(r"(\w+)\.$", before)
            if owner is None or owner.group(1) not in modules:
                continue
        return True
    return False


def _definition_path(model: SemanticModel, function: cst.FunctionDef) -> Optional[tuple[str, ...]]:
    """("train",) for a top-level def, ("Trainer", "fit") for a method of a top-level class;
    None for anything nested deeper (no other file can name it)."""
    import libcst as cst

    holder = model.parent(function)
    if isinstance(holder, cst.Module):
        return (function.name.value,)
    holder = model.parent(holder)  # a class body's IndentedBlock
    if isinstance(holder, cst.ClassDef) and isinstance(model.parent(holder), cst.Module):
        return (holder.name.value, function.name.value)
    return None


def _calls_of(other: SemanticModel, path: str, target: tuple[str, ...], name: str) -> Optional[list]:
    """The calls in `other` that run the definition `target` of file `path`; None when
    `other` uses it other than by calling it."""
    import libcst as cst

    found = []
    for node, _, _ in other.references.get(name, ()):
        parent = other.parent(node)
        if isinstance(parent, cst.Attribute) and parent.attr is node:
            expr = parent
        elif isinstance(parent, (cst.Attribute, cst.Param, cst.FunctionDef, cst.ClassDef)) or (
            isinstance(parent, cst.Arg) and parent.keyword is node
        ):
            continue  # `name.x`, a parameter, another definition, a keyword: not this definition
        else:
            expr = node
        if _in_import(other, expr):
            continue
        holder = other.parent(expr)
        if isinstance(holder, cst.Call) and holder.func is expr:
            callee = other.flow.callee(holder)
            if callee is not None and _is_definition(callee, path, target):
                found.append((other, holder, callee.bound))
        elif len(target) == 1 or target[1] == "__init__":
            resolved = _denoted(other, expr)
            if resolved is not None and os.path.abspath(resolved[0].path) == path and _node_path(resolved[0], resolved[1]) == target[:1]:
                aliased = _calls_through_alias(other, expr, path, target)
                if aliased is None:
                    return None  # passed as a value, subclassed: callers we cannot see
                found.extend(aliased)
    return found


def _calls_through_alias(other: SemanticModel, expr: cst.CSTNode, path: str, target: tuple[str, ...]) -> Optional[list]:
    """The calls of a local alias that `expr` is assigned to (`Exp = Experiment`, often one
    arm of an if/elif chain over task names, then `exp = Exp(args)`) that may run the
    definition `target` of file `path`; None when the alias is used other than by calling
    it, or `expr` is not the whole value of a one-name assignment."""
    import libcst as cst

    assign = other.parent(expr)
    if not (isinstance(assign, cst.Assign) and assign.value is expr and len(assign.targets) == 1
            and isinstance(assign.targets[0].target, cst.Name)):
        return None
    alias = assign.targets[0].target.value
    found = []
    for node, _, _ in other.references.get(alias, ()):
        holder = other.parent(node)
        if isinstance(holder, cst.AssignTarget):
            continue  # the alias bound (this arm or another): its calls are what counts
        if not (isinstance(holder, cst.Call) and holder.func is node):
            return None  # passed on, or its attributes read: callers we cannot see
        found.extend((other, holder, callee.bound) for callee in other.flow.callees(holder)
                     if _is_definition(callee, path, target))
    return found


def _in_import(model: SemanticModel, node: cst.CSTNode) -> bool:
    import libcst as cst

    for ancestor in model.ancestors(node):
        if isinstance(ancestor, (cst.Import, cst.ImportFrom)):
            return True
        if isinstance(ancestor, (cst.BaseSmallStatement, cst.BaseCompoundStatement)):
            return False
    return False


def _denoted(model: SemanticModel, expr: cst.CSTNode) -> Optional[tuple]:
    """The project definition a Name or dotted Attribute denotes through the file's imports."""
    from dplint.semantic import dotted_name

    dotted = dotted_name(expr)
    head = dotted.partition(".")[0] if dotted else None
    if head is None or model.project is None:
        return None
    try:
        qualified = model.imports.get(head) or model.project.star_imported(head, model)
        return None if qualified is None else model.project.resolve(qualified + dotted[len(head):], model)
    except Exception:
        return None


def _node_path(model: SemanticModel, node: cst.CSTNode) -> Optional[tuple[str, ...]]:
    import libcst as cst

    if isinstance(node, cst.ClassDef):
        return (node.name.value,) if isinstance(model.parent(node), cst.Module) else None
    if isinstance(node, cst.FunctionDef):
        return _definition_path(model, node)
    return None


def _is_definition(callee, path: str, target: tuple[str, ...]) -> bool:
    """Whether a resolved callee is the definition `target` of file `path`."""
    import libcst as cst

    if os.path.abspath(callee.model.path) != path:
        return False
    node = callee.node
    if isinstance(node, cst.ClassDef):
        return target == (node.name.value, "__init__")
    return _node_path(callee.model, node) == target


def owns(model: SemanticModel, node: cst.CSTNode) -> bool:
    """Whether `node` belongs to this model's tree (and not to another file's)."""
    return model.contains(node)


def top_level_definition(model: SemanticModel, name: str) -> Optional[cst.CSTNode]:
    """The last module-level def, class or assignment statement binding `name`, or None."""
    import libcst as cst

    found = None
    for binding in model.bindings.get(name, ()):
        if binding.scope.kind != "module":
            continue
        if isinstance(binding.node, (cst.Import, cst.ImportFrom)):
            found = None  # a re-export: the caller follows the import
            continue
        found = binding.node
    return found


def _literal_all(model: SemanticModel) -> Optional[set[str]]:
    """The names of a module-level `__all__ = [...]` of string literals (None: there is none,
    or it is built some other way and cannot be read)."""
    import libcst as cst

    found: Optional[set[str]] = None
    for binding in model.bindings.get("__all__", ()):
        if binding.scope.kind != "module":
            continue
        value = binding.value
        if not isinstance(value, (cst.List, cst.Tuple)) or not all(
                isinstance(element.value, cst.SimpleString) for element in value.elements):
            return None
        found = {element.value.evaluated_value for element in value.elements}
    return found


def _class_member(model: SemanticModel, node: cst.ClassDef, rest: list[str]) -> Optional[tuple[SemanticModel, cst.CSTNode]]:
    import libcst as cst

    if len(rest) != 1:
        return None
    for statement in node.body.body:
        if isinstance(statement, cst.FunctionDef) and statement.name.value == rest[0]:
            return model, statement
    return None
