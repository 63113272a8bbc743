"""Invalid and hostile configs: every problem reported at once, as file:line: error: ... (fix)."""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import qnn_custom_ops as qco
from qnn_custom_ops.opdef import parser

from tests.conftest import FIXTURE_CONFIGS, opdef_xml, simple_op

DIAGNOSTIC = re.compile(r"^.+:\d+: (error|warning): .+ \(.+\)$")


def errors_of(path) -> list[str]:
    with pytest.raises(qco.OpDefError) as info:
        qco.load_package(path)
    lines = str(info.value).splitlines()
    assert all(DIAGNOSTIC.match(line) for line in lines), lines
    assert len(lines) == len(info.value.diagnostics)
    return [line for line in lines if ": error: " in line]


def test_every_semantic_problem_of_a_file_is_reported_at_once(write_config):
    ops = f"""
    <OpDef>
      <Name>Broken</Name>
      <Input><Name>x</Name><Datatype>FLOAT_32</Datatype><Shape><Rank>ND</Rank></Shape>
        <Repeated>true</Repeated></Input>
      <Input><Name>x</Name><Datatype>FLOAT_32</Datatype><Shape><Rank>ND</Rank></Shape></Input>
      <Input><Name>z</Name><Datatype>BACKEND_SPECIFIC</Datatype><Shape><Rank>ND</Rank></Shape></Input>
      <Output><Name>y</Name><Datatype>FLOAT_32</Datatype><Shape><Rank>ND</Rank></Shape>
        <Default>0</Default></Output>
      <Parameter><Name>z</Name><Datatype>INT_32</Datatype><Shape><Rank>SCALAR</Rank></Shape></Parameter>
      <Parameter><Name>mode</Name><Mandatory>false</Mandatory><Datatype>UINT_32</Datatype>
        <Shape><Rank>SCALAR</Rank></Shape><Default>5</Default>
        <Enumeration><Enum>a</Enum><Enum>b</Enum></Enumeration></Parameter>
      <Parameter><Name>bad_type</Name><Datatype>FLOAT32</Datatype><Shape><Rank>7X</Rank>
        <Layout>HWC</Layout></Shape></Parameter>
      <SupportedBackend>HTP</SupportedBackend>
    </OpDef>
    {simple_op("class")}
    {simple_op("Fine", backend="NPU")}"""
    extra = """
    <SupplementalOpDefList Backend="HTP">
      <SupportedOps><OpName>Fine</OpName><OpName>Unlisted</OpName></SupportedOps>
      <SupplementalOpDef><Name>Missing</Name></SupplementalOpDef>
      <SupplementalOpDef><Name>Fine</Name>
        <Input><Name>nope</Name></Input>
        <Input><Name>y</Name></Input>
      </SupplementalOpDef>
    </SupplementalOpDefList>"""
    errors = errors_of(write_config(opdef_xml(ops, package="9Bad", extra=extra)))
    expected = [
        "input 'x' is Repeated, which the HTP backend does not support",
        "op Broken: input name 'x' is used twice",
        "input 'z' is BACKEND_SPECIFIC but backend HTP does not resolve it",
        "output 'y' has a Default",
        "param 'z' has the same name as an input",
        "param 'mode' has default '5', outside its 2 enum values",
        "unknown datatype 'FLOAT32'",
        "unknown rank '7X'",
        "unknown layout 'HWC'",
        "op name 'class' cannot become a C++ identifier",
        "unknown SupportedBackend 'NPU'",
        "SupplementalOpDef names unknown op 'Missing'",
        "SupportedOps names unknown op 'Unlisted'",
        "op Fine: SupplementalOpDef names unknown input 'nope'",
        "op Fine: SupplementalOpDef lists 'y' as input, but the OpDef declares it as output",
        "PackageName '9Bad' cannot become a C++ namespace",
    ]
    for message in expected:
        assert sum(message in e for e in errors) == 1, (message, errors)
    assert len(errors) == len(expected)


def test_schema_errors_name_the_line_and_element(write_config):
    config = opdef_xml("""
    <OpDef>
      <Name>NoOutput</Name>
      <Input><Name>x</Name><Datatype>FLOAT_32</Datatype><Shape><Rank>ND</Rank></Shape></Input>
      <SupportedBackend>HTP</SupportedBackend>
    </OpDef>""")
    errors = errors_of(write_config(config))
    assert len(errors) == 1
    assert re.search(r"config\.xml:8: error: Element 'SupportedBackend': unexpected here; expected .*Output", errors[0])


def test_is_static_tensor_on_an_output_is_a_schema_error(write_config):
    body = simple_op().replace("<Shape><Rank>ND</Rank></Shape></Output>",
                               "<Shape><Rank>ND</Rank></Shape><IsStaticTensor>true</IsStaticTensor></Output>")
    assert "IsStaticTensor" in errors_of(write_config(opdef_xml(body)))[0]


def test_missing_package_name_is_reported(write_config):
    config = opdef_xml(simple_op()).replace(' PackageName="TestPackage"', "")
    assert "PackageName" in errors_of(write_config(config))[0]


def test_sanitised_name_colliding_with_another_argument_is_an_error(write_config):
    body = """<Parameter><Name>x[0]</Name><Datatype>INT_32</Datatype><Shape><Rank>SCALAR</Rank></Shape></Parameter>
              <Parameter><Name>x_0</Name><Datatype>INT_32</Datatype><Shape><Rank>SCALAR</Rank></Shape></Parameter>"""
    errors = errors_of(write_config(opdef_xml(simple_op(body=body))))
    assert any("param 'x[0]' becomes 'x_0' in C++, which another argument already uses" in e for e in errors)


def test_supplemental_list_for_an_undeclared_backend_is_a_warning(write_config):
    extra = """<SupplementalOpDefList Backend="CPU"><SupplementalOpDef><Name>Simple</Name>
                 <Input><Name>x</Name><Datatype>FLOAT_16</Datatype></Input></SupplementalOpDef>
               </SupplementalOpDefList>"""
    with pytest.warns(qco.OpDefWarning, match="SupplementalOpDefList for backend CPU is ignored"):
        qco.load_package(write_config(opdef_xml(simple_op(), extra=extra)))


@pytest.mark.parametrize("content, message", [
    (b"", "config is empty"),
    (b"   \n\t ", "config is empty"),
    (b"<OpDefCollection PackageName='x'><OpDefList>", "not well-formed XML"),
    (b"\x00\xff\xfe garbage \x89PNG\r\n", "not well-formed XML"),
    (b"<?xml version='1.0'?><Other/>", "No matching global declaration"),
    ("<?xml version='1.0'?><OpDefCollection PackageName='\u00e9'/>".encode(), "Missing child element"),
])
def test_malformed_input_is_one_clear_error(write_config, content, message):
    errors = errors_of(write_config(content))
    assert len(errors) == 1 and message in errors[0]


def test_external_entity_is_refused_without_reading_it(write_config, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET")
    config = f"""<?xml version="1.0"?>
<!DOCTYPE OpDefCollection [<!ENTITY xxe SYSTEM "file://{secret}">]>
<OpDefCollection PackageName="Pkg"><OpDefList><OpDef><Name>&xxe;</Name></OpDef></OpDefList></OpDefCollection>"""
    errors = errors_of(write_config(config))
    assert len(errors) == 1 and "DOCTYPE declarations are not allowed" in errors[0]
    assert "TOP-SECRET" not in errors[0]


def test_network_entity_is_refused(write_config):
    config = """<?xml version="1.0"?>
<!DOCTYPE OpDefCollection SYSTEM "http://192.0.2.1/opdef.dtd">
<OpDefCollection PackageName="Pkg"/>"""
    assert "DOCTYPE declarations are not allowed" in errors_of(write_config(config))[0]


def test_billion_laughs_is_refused(write_config):
    entities = "\n".join(f'<!ENTITY lol{i} "{("&lol" + str(i - 1) + ";") * 10}">' for i in range(1, 10))
    config = f"""<?xml version="1.0"?>
<!DOCTYPE lolz [<!ENTITY lol0 "lol">
{entities}]>
<OpDefCollection PackageName="&lol9;"/>"""
    errors = errors_of(write_config(config))
    assert len(errors) == 1 and ("DOCTYPE" in errors[0] or "not well-formed" in errors[0])


def test_oversized_file_is_refused_before_parsing(write_config, monkeypatch):
    monkeypatch.setattr(parser, "MAX_FILE_BYTES", 1000)
    errors = errors_of(write_config(opdef_xml(simple_op() * 10)))
    assert "over the 1000 byte limit" in errors[0]


def test_tree_with_too_many_elements_is_refused(write_config, monkeypatch):
    monkeypatch.setattr(parser, "MAX_ELEMENTS", 50)
    config = opdef_xml("\n".join(simple_op(f"Op{i}") for i in range(10)))
    assert "more than 50 elements" in errors_of(write_config(config))[0]


def test_unreadable_path_is_an_error(tmp_path):
    errors = errors_of(tmp_path / "missing.xml")
    assert "cannot read config" in errors[0]


def _load_or_error(path) -> None:
    """The contract: a package or an OpDefError (warnings allowed), nothing else."""
    try:
        qco.load_package(path)
    except qco.OpDefError as exc:
        assert exc.diagnostics and all(d.severity in ("error", "warning") for d in exc.diagnostics)


FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@FUZZ
@given(data=st.binary(max_size=2000))
def test_fuzz_any_bytes_give_a_package_or_an_opdef_error(tmp_path, data):
    path = tmp_path / "fuzz.xml"
    path.write_bytes(data)
    _load_or_error(path)


VALID_TEXTS = [p.read_text() for p in FIXTURE_CONFIGS]


@st.composite
def mutated_configs(draw):
    text = draw(st.sampled_from(VALID_TEXTS))
    for _ in range(draw(st.integers(1, 4))):
        start = draw(st.integers(0, len(text)))
        end = draw(st.integers(start, min(len(text), start + 40)))
        choice = draw(st.integers(0, 3))
        if choice == 0:  # delete a span
            text = text[:start] + text[end:]
        elif choice == 1:  # duplicate a span
            text = text[:end] + text[start:end] + text[end:]
        elif choice == 2:  # insert markup-ish text
            text = text[:start] + draw(st.sampled_from(
                ["<", ">", "</Input>", "<Default>N-1</Default>", "&amp;", "&x;", "]]>", "\x00", "in[0]",
                 "<Repeated>true</Repeated>", "BACKEND_SPECIFIC", "<Parameter>"])) + text[start:]
        else:  # replace with random text
            text = text[:start] + draw(st.text(max_size=20)) + text[end:]
    return text


@pytest.mark.slow
@FUZZ
@given(text=mutated_configs())
@pytest.mark.filterwarnings("ignore::qnn_custom_ops.OpDefWarning")  # a warned package is a package
def test_fuzz_mutated_valid_configs_give_a_package_or_an_opdef_error(tmp_path, text):
    path = tmp_path / "mutated.xml"
    path.write_bytes(text.encode("utf-8", "surrogatepass"))
    _load_or_error(path)


def test_pretty_printed_names_and_datatypes_are_trimmed(write_config):
    config = opdef_xml(simple_op("Trimmed").replace("<Name>Trimmed</Name>", "<Name>\n        Trimmed\n      </Name>")
                       .replace("<Datatype>QNN_DATATYPE_FLOAT_32</Datatype>",
                                "<Datatype>\n  QNN_DATATYPE_FLOAT_32\n</Datatype>"))
    package = qco.load_package(write_config(config))
    assert list(package.ops) == ["Trimmed"]
    assert package.ops["Trimmed"].inputs[0].datatypes == (qco.Datatype.FLOAT_32,)


def test_ops_differing_only_in_case_are_refused(write_config):
    path = write_config(opdef_xml(simple_op("Foo") + simple_op("foo")))
    with pytest.raises(qco.OpDefError, match=r"ops Foo \(.*\) and foo differ only in case"):
        qco.load_package(path)


@pytest.mark.parametrize("name, reason", [
    ("NULL", "it is a standard C macro"),
    ("INT32_MAX", "it is a standard C macro"),
    ("INT32_C", "it is a standard C macro"),
    ("INFINITY", "it is a standard C macro"),
    ("NAN", "it is a standard C macro"),
    ("_Pragma", "reserved for the compiler"),
    ("qco_helper", "names starting with qco_ are the generated code's own"),
    ("class", "it is a C++ keyword"),
])
def test_macro_and_reserved_op_names_are_refused_with_the_reason(write_config, name, reason):
    errors = errors_of(write_config(opdef_xml(simple_op(name))))
    assert errors == [next(e for e in errors if f"op name {name!r} cannot become a C++ identifier" in e)]
    assert reason in errors[0]


@pytest.mark.parametrize("package", ["qco", "std", "NULL"])
def test_a_package_named_like_the_generated_codes_namespaces_is_refused(write_config, package):
    (error,) = errors_of(write_config(opdef_xml(simple_op(), package=package)))
    assert f"PackageName {package!r} cannot become a C++ namespace" in error
