from configparser import ConfigParser
import setuptools, shlex

# note: the nbdev template imports pkg_resources here; current setuptools has none, so it is dropped.
config = ConfigParser(delimiters=['='])
config.read('settings.ini', encoding='utf-8')
cfg = config['DEFAULT']

cfg_keys = 'version description keywords author author_email'.split()
expected = cfg_keys + "lib_name user branch license status min_python audience language".split()
for o in expected: assert o in cfg, "missing expected setting: {}".format(o)
setup_cfg = {o: cfg[o] for o in cfg_keys}

licenses = {
    'apache2': ('Apache Software License 2.0', 'OSI Approved :: Apache Software License'),
}
statuses = ['1 - Planning', '2 - Pre-Alpha', '3 - Alpha', '4 - Beta', '5 - Production/Stable', '6 - Mature', '7 - Inactive']
py_versions = '3.11 3.12 3.13'.split()

requirements = shlex.split(cfg.get('requirements', ''))
if cfg.get('pip_requirements'): requirements += shlex.split(cfg.get('pip_requirements', ''))
min_python = cfg['min_python']
lic = licenses.get(cfg['license'].lower(), (cfg['license'], None))
test_requirements = (cfg.get('test_requirements') or '').split()
# [dev] = notebooks + tests + docs; [test] = what CI needs; [vllm] = vLLM on a CPU for the cross-checks
dev_requirements = (cfg.get('dev_requirements') or '').split() + test_requirements
vllm_requirements = (cfg.get('vllm_requirements') or '').split()

package_data = dict()
pkg_data = cfg.get('package_data', None)
if pkg_data:
    package_data[cfg['lib_name']] = pkg_data.split()

setuptools.setup(
    name=cfg['lib_name'],
    license=lic[0],
    classifiers=[
        'Development Status :: ' + statuses[int(cfg['status'])],
        'Intended Audience :: ' + cfg['audience'].title(),
        'Natural Language :: ' + cfg['language'].title(),
    ] + ['Programming Language :: Python :: ' + o for o in py_versions[py_versions.index(min_python):]] + (['License :: ' + lic[1]] if lic[1] else []),
    url=cfg['git_url'],
    packages=setuptools.find_packages(include=[cfg['lib_name'], cfg['lib_name'] + '.*']),
    include_package_data=True,
    install_requires=requirements,
    extras_require={'dev': dev_requirements, 'test': test_requirements, 'vllm': vllm_requirements},
    dependency_links=cfg.get('dep_links', '').split(),
    python_requires='>=' + cfg['min_python'],
    long_description=open('README.md', encoding='utf-8').read(),
    long_description_content_type='text/markdown',
    zip_safe=False,
    entry_points={
        'console_scripts': cfg.get('console_scripts', '').split(),
        'nbdev': [f'{cfg.get("lib_path")}={cfg.get("lib_path")}._modidx:d'],
        # vLLM loads this in every process it starts: serve Inkling through the fp8-capable classes (nbs/14_vllm.ipynb)
        'vllm.general_plugins': ['inkling_fp8kv = inkling_fp8kv.vllm_compat:register'],
    },
    **setup_cfg)
