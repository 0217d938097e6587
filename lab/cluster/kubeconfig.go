package cluster

import (
	"fmt"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// KubeconfigAuth is how a kubeconfig's user authenticates: a bearer token,
// or a client certificate and key (files).
type KubeconfigAuth struct {
	Token             string
	CertFile, KeyFile string
}

// WriteKubeconfig writes a kubeconfig for server, trusting the CA in
// caFile, with one context "default".
func WriteKubeconfig(path, server, caFile string, auth KubeconfigAuth) error {
	if (auth.Token == "") == (auth.CertFile == "") {
		return fmt.Errorf("write kubeconfig %s: want a token or a client certificate, one of them", path)
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["default"] = &clientcmdapi.Cluster{Server: server, CertificateAuthority: caFile}
	cfg.AuthInfos["default"] = &clientcmdapi.AuthInfo{Token: auth.Token, ClientCertificate: auth.CertFile, ClientKey: auth.KeyFile}
	cfg.Contexts["default"] = &clientcmdapi.Context{Cluster: "default", AuthInfo: "default"}
	cfg.CurrentContext = "default"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("write kubeconfig %s: %w", path, err)
	}
	return nil
}
