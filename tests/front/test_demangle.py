"""The Itanium demangler against names nvcc 13.0 produced, with c++filt's reading (minus the return type)."""

import pytest

from ptxforge.ptx.demangle import demangle, demangle_words, short_name, signature, template_arguments

# (mangled, what binutils' c++filt prints without the leading return type)
CASES = [
    ("_Z5scaleIdEvPT_S0_i", "scale<double>(double*, double, int)"),
    ("_Z5scaleI6__halfEvPT_S1_i", "scale<__half>(__half*, __half, int)"),
    ("_Z6plainfPfPPiPVKd", "plainf(float*, int**, double const volatile*)"),
    ("_Z2kbILb1EEvPf", "kb<true>(float*)"),
    ("_ZN2ns2k1IfLi128EEEvPT_PKS1_i", "ns::k1<float, 128>(float*, float const*, int)"),
    ("_ZN2ns2k1IhLin3EEEvPT_PKS1_i", "ns::k1<unsigned char, -3>(unsigned char*, unsigned char const*, int)"),
    ("_ZN2ns2k2IifEEvPT_PT0_S1_S3_PNS_3FooES5_", "ns::k2<int, float>(int*, float*, int, float, ns::Foo*, ns::Foo)"),
    ("_ZN2ns2k2INS_3FooExEEvPT_PT0_S2_S4_PS1_S1_",
     "ns::k2<ns::Foo, long long>(ns::Foo*, long long*, ns::Foo, long long, ns::Foo*, ns::Foo)"),
    ("_ZZ9block_sumIfLi64EEvPKT_PS0_iE3buf", "block_sum<float, 64>(float const*, float*, int)::buf"),
    ("_Z3fooSt6vectorIiSaIiEE", "foo(std::vector<int, std::allocator<int> >)"),
    ("_Z3barPSt5arrayIfLm4EE", "bar(std::array<float, 4ul>*)"),
]


@pytest.mark.parametrize("mangled,expected", CASES)
def test_demangle_matches_cxxfilt(mangled, expected):
    assert demangle(mangled) == expected


def test_parameter_types_and_pointees():
    sig = signature("_ZN2ns2k1IfLi128EEEvPT_PKS1_i")
    assert sig.name == "ns::k1<float, 128>"
    assert [str(p.pointee()) if p.pointee() else None for p in sig.params] == ["float", "float", None]
    assert short_name("_Z5scaleIdEvPT_S0_i") == "scale<double>"


def test_function_type_template_argument():
    (ftype,) = template_arguments("_Z23__ptxforge_signature_ofIFvPfPKdiEEvv")
    assert [str(p) for p in ftype.params] == ["float*", "double const*", "int"]


def test_unknown_names_come_back_unchanged():
    assert demangle("vadd") == "vadd"
    assert demangle("_ZplRK3FooS1_") == "_ZplRK3FooS1_"  # an operator: not covered, not guessed
    assert demangle("_Z5scaleIdEvPT_S9_i") == "_Z5scaleIdEvPT_S9_i"  # a substitution that does not exist
    assert demangle_words("__shared__ _ZZ3fooPfE3buf (64 bytes)") == "__shared__ foo(float*)::buf (64 bytes)"
