"""Reading OpDef configs: real fixtures, every feature of the format, merging."""

from __future__ import annotations

import warnings

import pytest

import qnn_custom_ops as qco
from qnn_custom_ops.opdef import Datatype, Layout

from tests.conftest import DATA, FIXTURE_CONFIGS, FIXTURES, opdef_xml, simple_op


@pytest.mark.parametrize("config", FIXTURE_CONFIGS, ids=lambda p: p.name)
def test_every_shared_fixture_loads_with_its_ops(config):
    package = qco.load_package(config)
    assert package.path == config
    assert package.domain == "aisw" and package.version == "1.0"
    for op in package.ops.values():
        assert op.inputs and op.outputs and op.backends == ("HTP",)
        for tensor in op.inputs + op.outputs:
            assert tensor.datatypes == (Datatype.FLOAT_32, Datatype.UFIXED_POINT_8)
            assert tensor.shape.rank == 4 and tensor.shape.layout is Layout.NHWC


def test_example_package_model():
    package = qco.load_package(FIXTURES / "example_op_package_htp.xml")
    assert package.name == "ExampleOpPackage"
    assert list(package.ops) == ["ExampleCustomOp"]
    op = package.ops["ExampleCustomOp"]
    assert [t.name for t in op.inputs] == ["input"] and [t.name for t in op.outputs] == ["output"]
    assert op.params == ()
    assert op.inputs[0].mandatory and op.inputs[0].description == "input activation"


def test_split_package_has_two_outputs_in_order():
    op = qco.load_package(FIXTURES / "split_custom_op_package.xml").ops["SplitCustomOp"]
    assert [t.name for t in op.outputs] == ["first_half", "second_half"]


@pytest.fixture(scope="module")
def feature_package():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        package = qco.load_package(DATA / "every_feature.xml")
    return package, [str(w.message) for w in caught]


def test_tolerated_oddities_are_warnings_with_file_and_line(feature_package):
    package, caught = feature_package
    assert caught == list(package.warnings)
    assert any("every_feature.xml:13: warning:" in w and "'in[0]'" in w and "'in_0'" in w for w in caught)
    assert any(":87: warning:" in w and "'N-1'" in w for w in caught)
    assert len(caught) == 2


def test_params_parse_defaults_by_datatype(feature_package):
    op = feature_package[0].ops["FusedNorm"]
    defaults = {p.name: (p.default.value if p.default else None) for p in op.params}
    assert defaults == {"eps": 1e-6, "axis": -1, "keep_dims": False, "mode": 1,
                        "scales": (1.0, 0.5), "groups": None, "last": None, "block": None}
    assert isinstance(defaults["keep_dims"], bool)
    mode = op.tensor("mode")
    assert mode.enum_values == ("mean", "rms", "max") and mode.is_enum
    assert op.tensor("last").default.text == "N-1"
    assert [p.mandatory for p in op.params] == [False] * 7 + [True]


def test_tensor_attributes(feature_package):
    op = feature_package[0].ops["FusedNorm"]
    weight = op.tensor("weight")
    assert weight.is_static and not weight.mandatory and weight.shape.rank == 1
    assert weight.constraints[0].type == "Shape" and weight.constraints[0].id == "0"
    assert op.tensor("position_ids").datatypes == (Datatype.INT_32,)  # unprefixed name accepted
    assert op.tensor("position_ids").shape.rank == 2
    assert op.tensor("eps").is_scalar
    assert op.tensor("in[0]").c_name == "in_0"
    assert op.outputs[0].name == "indices"  # never renamed
    assert op.backends == ("HTP", "CPU")
    assert op.references == (("paper", "https://example.invalid/rmsnorm"),)
    assert "rsqrt" in op.description


def test_backend_specific_datatypes_resolve_per_backend(feature_package):
    op = feature_package[0].ops["FusedNorm"]
    assert op.tensor("in[0]").datatypes == (Datatype.BACKEND_SPECIFIC,)
    assert op.datatypes("in[0]", "HTP") == (Datatype.UFIXED_POINT_8, Datatype.UFIXED_POINT_16)
    assert op.datatypes("in[0]", "CPU") == (Datatype.FLOAT_32,)
    assert op.layout("in[0]", "HTP") is Layout.NHWC and op.layout("in[0]", "CPU") is Layout.UNDEFINED
    assert op.datatypes("weight", "HTP") == (Datatype.FLOAT_32, Datatype.UFIXED_POINT_8)
    assert op.supplements["HTP"]["mode"].only_default_supported is True


def test_model_is_frozen(feature_package):
    package = feature_package[0]
    with pytest.raises(AttributeError):
        package.name = "Other"
    with pytest.raises(TypeError):
        package.ops["New"] = package.ops["TopTwo"]


def test_multiple_ops_keep_file_order(feature_package):
    assert list(feature_package[0].ops) == ["FusedNorm", "TopTwo"]


@pytest.mark.parametrize("rank_text, rank", [("SCALAR", 0), ("0D", 0), ("3D", 3), ("5D", 5), ("ND", None),
                                             ("1", 1), ("4", 4), ("nd", None)])
def test_rank_spellings(write_config, rank_text, rank):
    body = f"""<Parameter><Name>p</Name><Mandatory>true</Mandatory><Datatype>FLOAT_32</Datatype>
               <Shape><Rank>{rank_text}</Rank></Shape></Parameter>"""
    package = qco.load_package(write_config(opdef_xml(simple_op(body=body))))
    assert package.ops["Simple"].tensor("p").shape.rank == rank


def test_several_configs_of_one_package_merge(write_config):
    first = write_config(opdef_xml(simple_op("First")), "a.xml")
    second = write_config(opdef_xml(simple_op("Second")), "b.xml")
    package = qco.load_package(first, second)
    assert list(package.ops) == ["First", "Second"]
    assert package.paths == (first, second)


def test_supplemental_list_in_another_config_of_the_package_applies(write_config):
    base = write_config(opdef_xml(simple_op("Op").replace("QNN_DATATYPE_FLOAT_32</Datatype><Shape><Rank>ND</Rank></Shape></Input>",
                                                         "BACKEND_SPECIFIC</Datatype><Shape><Rank>ND</Rank></Shape></Input>")), "a.xml")
    extra = write_config(opdef_xml(simple_op("Other"), extra="""
        <SupplementalOpDefList Backend="HTP"><SupplementalOpDef><Name>Op</Name>
          <Input><Name>x</Name><Datatype>UFIXED_POINT_16</Datatype></Input>
        </SupplementalOpDef></SupplementalOpDefList>"""), "b.xml")
    package = qco.load_package(base, extra)
    assert package.ops["Op"].datatypes("x", "HTP") == (Datatype.UFIXED_POINT_16,)


def test_merging_configs_of_different_packages_is_an_error(write_config):
    first = write_config(opdef_xml(simple_op("First"), package="One"), "a.xml")
    second = write_config(opdef_xml(simple_op("Second"), package="Two"), "b.xml")
    with pytest.raises(qco.OpDefError, match=r"b\.xml:2: error: PackageName 'Two' differs from 'One'"):
        qco.load_package(first, second)


def test_same_op_in_two_configs_is_an_error(write_config):
    first = write_config(opdef_xml(simple_op("Op")), "a.xml")
    second = write_config(opdef_xml(simple_op("Op")), "b.xml")
    with pytest.raises(qco.OpDefError, match=r"op Op is defined twice \(first at .*a\.xml:4\)"):
        qco.load_package(first, second)


def test_load_package_needs_a_path():
    with pytest.raises(TypeError, match="at least one config"):
        qco.load_package()
