// Package ignition produces and checks the ignition configs that configure
// an IronCore hypervisor node built from recipes/hypervisor.yaml. The image
// carries every program and unit; a node config carries only what differs
// between sites and nodes: hostname, SSH keys, kubeconfigs, the machine
// pool, provider flags, Ceph monitors and keys, dpservice/metalnet
// settings. The files it writes are the ones the image's units read
// (docs/hypervisor.md lists them).
//
// Configs use ignition spec 3.3.0: the image ships Debian's ignition 2.14,
// which reads specs 3.0 to 3.3.
package ignition

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/coreos/ignition/v2/config/v3_3/types"
)

// SpecVersion is the ignition config version produced and the newest one
// the image's ignition reads.
const SpecVersion = "3.3.0"

// Paths the image's units read (units/*.service).
const (
	LibvirtProviderEnv    = "/etc/ironcore/libvirt-provider.env"
	MachineClassesFile    = "/etc/ironcore/machine-classes.yaml"
	MachinepoolletEnv     = "/etc/ironcore/machinepoollet.env"
	MachinepoolletKubecfg = "/etc/ironcore/machinepoollet/kubeconfig"
	MetalnetEnv           = "/etc/ironcore/metalnet.env"
	MetalnetKubecfg       = "/etc/ironcore/metalnet/kubeconfig"
	DpserviceEnv          = "/etc/ironcore/dpservice.env"
	CephConf              = "/etc/ceph/ceph.conf"
	HugepagesSysctl       = "/etc/sysctl.d/90-hugepages.conf"
)

// Node is one node's configuration.
type Node struct {
	Hostname string
	// SSHAuthorizedKeys are installed for root.
	SSHAuthorizedKeys []string
	// RootPasswordHash (crypt(3)), empty for none: console login disabled.
	RootPasswordHash string
	// Hugepages is vm.nr_hugepages (2 MiB pages) for VM memory; 0 leaves it.
	Hugepages int

	LibvirtProvider *LibvirtProvider
	Machinepoollet  *Machinepoollet
	Ceph            *Ceph
	Dpservice       *Dpservice
	Metalnet        *Metalnet

	// Dropins are systemd drop-ins for units the image ships: unit name ->
	// drop-in name -> contents.
	Dropins map[string]map[string]string
}

// LibvirtProvider configures libvirt-provider.service.
type LibvirtProvider struct {
	// MachineClasses is the supported machine classes file (YAML list of
	// compute.ironcore.dev MachineClass objects).
	MachineClasses string
	// Flags are extra command-line flags, e.g.
	// --network-interface-plugin-name=apinet, --enable-hugepages.
	Flags []string
}

// Machinepoollet configures machinepoollet.service.
type Machinepoollet struct {
	Kubeconfig      string
	MachinePoolName string
	ProviderID      string
	Flags           []string
}

// Ceph configures the Ceph client libvirt-provider's ceph volumes use.
type Ceph struct {
	FSID     string
	Monitors []string
	// Keyrings maps a client name (client.libvirt) to its keyring file.
	Keyrings map[string]string
}

// Dpservice configures dpservice-prepare.service and dpservice.service.
type Dpservice struct {
	Hugepages1G int
	Modules     []string
	PFDevices   []string
	NumVFs      int
	EALArgs     []string
	Args        []string
}

// Metalnet configures metalnet.service.
type Metalnet struct {
	Kubeconfig string
	// DpserviceAddress defaults to 127.0.0.1:1337.
	DpserviceAddress string
	Flags            []string
}

// Generate renders n as an ignition config (indented JSON, stable order).
func Generate(n Node) ([]byte, error) {
	if n.Hostname == "" {
		return nil, fmt.Errorf("hostname is required")
	}
	var c types.Config
	c.Ignition.Version = SpecVersion
	add := func(path, mode, contents string) {
		c.Storage.Files = append(c.Storage.Files, file(path, mode, contents))
	}
	add("/etc/hostname", "0644", n.Hostname+"\n")

	root := types.PasswdUser{Name: "root"}
	for _, k := range n.SSHAuthorizedKeys {
		root.SSHAuthorizedKeys = append(root.SSHAuthorizedKeys, types.SSHAuthorizedKey(k))
	}
	if n.RootPasswordHash != "" {
		root.PasswordHash = ptr(n.RootPasswordHash)
	}
	if len(root.SSHAuthorizedKeys) > 0 || root.PasswordHash != nil {
		c.Passwd.Users = append(c.Passwd.Users, root)
	}
	if n.Hugepages > 0 {
		add(HugepagesSysctl, "0644", fmt.Sprintf("vm.nr_hugepages = %d\n", n.Hugepages))
	}
	if p := n.LibvirtProvider; p != nil {
		if p.MachineClasses == "" {
			return nil, fmt.Errorf("libvirt-provider: machine classes are required")
		}
		add(MachineClassesFile, "0644", p.MachineClasses)
		add(LibvirtProviderEnv, "0644", envFile(map[string]string{"LIBVIRT_PROVIDER_FLAGS": strings.Join(p.Flags, " ")}))
	}
	if p := n.Machinepoollet; p != nil {
		if p.Kubeconfig == "" || p.MachinePoolName == "" {
			return nil, fmt.Errorf("machinepoollet: kubeconfig and machine pool name are required")
		}
		id := p.ProviderID
		if id == "" {
			id = "libvirt-provider://" + n.Hostname
		}
		// machinepoollet runs as its own user: it must read its kubeconfig.
		kc := file(MachinepoolletKubecfg, "0640", p.Kubeconfig)
		kc.Group.Name = ptr("machinepoollet")
		c.Storage.Files = append(c.Storage.Files, kc)
		add(MachinepoolletEnv, "0644", envFile(map[string]string{
			"MACHINE_POOL_NAME":    p.MachinePoolName,
			"PROVIDER_ID":          id,
			"MACHINEPOOLLET_FLAGS": strings.Join(p.Flags, " "),
		}))
	}
	if p := n.Ceph; p != nil {
		var b strings.Builder
		b.WriteString("[global]\n")
		if p.FSID != "" {
			fmt.Fprintf(&b, "fsid = %s\n", p.FSID)
		}
		fmt.Fprintf(&b, "mon_host = %s\n", strings.Join(p.Monitors, ","))
		add(CephConf, "0644", b.String())
		for _, name := range sortedKeys(p.Keyrings) {
			add("/etc/ceph/ceph."+name+".keyring", "0640", p.Keyrings[name])
		}
	}
	if p := n.Dpservice; p != nil {
		env := map[string]string{
			"DPSERVICE_EAL_ARGS": strings.Join(p.EALArgs, " "),
			"DPSERVICE_ARGS":     strings.Join(p.Args, " "),
		}
		if p.Hugepages1G > 0 {
			env["DPSERVICE_HUGEPAGES_1G"] = fmt.Sprint(p.Hugepages1G)
		}
		if len(p.Modules) > 0 {
			env["DPSERVICE_MODULES"] = strings.Join(p.Modules, " ")
		}
		if len(p.PFDevices) > 0 {
			env["DPSERVICE_PF_DEVICES"] = strings.Join(p.PFDevices, " ")
			env["DPSERVICE_NUM_VFS"] = fmt.Sprint(p.NumVFs)
		}
		add(DpserviceEnv, "0644", envFile(env))
	}
	if p := n.Metalnet; p != nil {
		if p.Kubeconfig == "" {
			return nil, fmt.Errorf("metalnet: kubeconfig is required")
		}
		env := map[string]string{"METALNET_FLAGS": strings.Join(p.Flags, " ")}
		if p.DpserviceAddress != "" {
			env["DPSERVICE_ADDRESS"] = p.DpserviceAddress
		}
		add(MetalnetKubecfg, "0640", p.Kubeconfig)
		add(MetalnetEnv, "0644", envFile(env))
	}
	for _, unit := range sortedKeys(n.Dropins) {
		u := types.Unit{Name: unit}
		for _, name := range sortedKeys(n.Dropins[unit]) {
			u.Dropins = append(u.Dropins, types.Dropin{Name: name, Contents: ptr(n.Dropins[unit][name])})
		}
		c.Systemd.Units = append(c.Systemd.Units, u)
	}
	sort.Slice(c.Storage.Files, func(i, j int) bool { return c.Storage.Files[i].Path < c.Storage.Files[j].Path })
	// types.Config marshals every empty struct ({}); drop them so that the
	// config reads like a hand-written one.
	raw, err := json.Marshal(c)
	if err != nil {
		return nil, err
	}
	var tree any
	if err := json.Unmarshal(raw, &tree); err != nil {
		return nil, err
	}
	out, err := json.MarshalIndent(pruneEmpty(tree), "", "  ")
	if err != nil {
		return nil, err
	}
	return append(out, '\n'), nil
}

func pruneEmpty(v any) any {
	switch t := v.(type) {
	case map[string]any:
		for k, x := range t {
			x = pruneEmpty(x)
			if m, ok := x.(map[string]any); ok && len(m) == 0 {
				delete(t, k)
				continue
			}
			t[k] = x
		}
	case []any:
		for i := range t {
			t[i] = pruneEmpty(t[i])
		}
	}
	return v
}

func file(path, mode, contents string) types.File {
	var m int
	fmt.Sscanf(mode, "%o", &m)
	return types.File{
		Node: types.Node{Path: path, Overwrite: ptr(true)},
		FileEmbedded1: types.FileEmbedded1{
			Mode:     &m,
			Contents: types.Resource{Source: ptr(DataURL([]byte(contents)))},
		},
	}
}

// DataURL encodes b as a base64 data URL, the way ignition embeds files.
func DataURL(b []byte) string {
	return "data:;base64," + base64.StdEncoding.EncodeToString(b)
}

// envFile renders a systemd EnvironmentFile= file; values are quoted so
// that flags with spaces stay one variable.
func envFile(env map[string]string) string {
	var b strings.Builder
	b.WriteString("# Written by ignition (os-builder node config).\n")
	for _, k := range sortedKeys(env) {
		fmt.Fprintf(&b, "%s=%q\n", k, env[k])
	}
	return b.String()
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func ptr[T any](v T) *T { return &v }

// Example is a complete node with placeholder values, for
// `builder ignition example`.
func Example() Node {
	kubeconfig := func(user string) string {
		return `apiVersion: v1
kind: Config
clusters:
- name: ironcore
  cluster:
    server: https://ironcore-api.example.com:6443
    certificate-authority-data: REPLACE-WITH-BASE64-CA
contexts:
- name: ironcore
  context: {cluster: ironcore, user: ` + user + `}
current-context: ironcore
users:
- name: ` + user + `
  user:
    token: REPLACE-WITH-BOOTSTRAP-TOKEN
`
	}
	return Node{
		Hostname:          "hv-example-01",
		SSHAuthorizedKeys: []string{"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIExampleExampleExampleExampleExampleExample operator@example"},
		Hugepages:         1024,
		LibvirtProvider: &LibvirtProvider{
			MachineClasses: `- apiVersion: compute.ironcore.dev/v1alpha1
  kind: MachineClass
  metadata:
    name: x3-small
  capabilities:
    cpu: "2"
    memory: 4Gi
`,
			Flags: []string{"--network-interface-plugin-name=apinet", "--apinet-node-name=hv-example-01", "--enable-hugepages"},
		},
		Machinepoollet: &Machinepoollet{
			Kubeconfig:      kubeconfig("machinepoollet"),
			MachinePoolName: "hv-example-01",
		},
		Ceph: &Ceph{
			FSID:     "00000000-0000-4000-8000-000000000000",
			Monitors: []string{"10.0.0.11:6789", "10.0.0.12:6789", "10.0.0.13:6789"},
			Keyrings: map[string]string{"client.libvirt": "[client.libvirt]\n\tkey = REPLACE-WITH-CEPH-KEY\n"},
		},
		Dpservice: &Dpservice{
			Hugepages1G: 4,
			Modules:     []string{"vfio-pci"},
			PFDevices:   []string{"0000:3b:00.0"},
			NumVFs:      32,
			EALArgs:     []string{"-l", "0,1", "-a", "0000:3b:00.0,representor=pf0vf[0-31]"},
			Args:        []string{"--pf0=eth0", "--vf-pattern=eth0v", "--ipv6=2001:db8::1", "--enable-ipv6-overlay"},
		},
		Metalnet: &Metalnet{
			Kubeconfig: kubeconfig("metalnet"),
			Flags:      []string{"--router-address=2001:db8::ffff", "--metalbond-peer=[2001:db8::100]:4711"},
		},
	}
}
